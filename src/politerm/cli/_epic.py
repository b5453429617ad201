"""Shared bits of the epic commands: the epic store of the configured run store."""

from __future__ import annotations

import contextlib
import typing as t

from politerm.cli._common import open_store
from politerm.redact import Redactor
from politerm.store.epics import EpicStore

if t.TYPE_CHECKING:
    from collections.abc import Iterator

    from politerm.config import Config


@contextlib.contextmanager
def epic_store(config: Config) -> Iterator[EpicStore]:
    """The run store's epic tables, redacting with the configured patterns."""
    with open_store(config) as store:
        yield EpicStore(store, Redactor(config.redact.patterns))
