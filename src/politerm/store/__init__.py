"""Durable run store: SQLite state of agents, tasks and messages, plus a JSONL audit log.

Every write is one short transaction committed before the caller acts on it, so the router
can be ``kill -9``'d at any moment and resume without losing or repeating a message.
"""

from __future__ import annotations

from politerm.store.audit import AuditLog, audit_path_for, iter_audit
from politerm.store.db import MIGRATIONS, SCHEMA_VERSION, Migration, default_store_path
from politerm.store.models import (
    MESSAGE_TRANSITIONS,
    Agent,
    Block,
    Event,
    Expectation,
    Message,
    MessageState,
    Task,
    TaskState,
    Turn,
    TurnEnd,
    TurnState,
    can_transition,
)
from politerm.store.runstore import RunStore

__all__ = [
    "MESSAGE_TRANSITIONS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Agent",
    "AuditLog",
    "Block",
    "Event",
    "Expectation",
    "Message",
    "MessageState",
    "Migration",
    "RunStore",
    "Task",
    "TaskState",
    "Turn",
    "TurnEnd",
    "TurnState",
    "audit_path_for",
    "can_transition",
    "default_store_path",
    "iter_audit",
]
