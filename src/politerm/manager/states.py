"""The manager's state machine as data: states, the allowed transitions, one checker.

Each project the manager drives is in exactly one :class:`ManagerState`. The engine moves it
with :func:`check_transition`, and the store writes every move as an event before the engine
acts on it, so ``poli status`` and the UI see the same history the engine resumes from.
"""

from __future__ import annotations

import enum
import typing as t

from politerm.errors import ManagerStateError


class ManagerState(str, enum.Enum):
    """Where one manager project stands."""

    IDLE = "idle"
    LOADING_PROJECT = "loading_project"
    PROJECT_SELECTED = "project_selected"
    CALLING_BRAIN = "calling_brain"
    WAITING_DEV_REPORT = "waiting_dev_report"
    PROCESSING_REPORT = "processing_report"
    PAUSED_WAITING_USER_INPUT = "paused_waiting_user_input"
    SUMMARIZING_CONTEXT = "summarizing_context"
    TASK_COMPLETE = "task_complete"
    # Error states say what failed.
    ERROR_PROJECT = "error_project"
    ERROR_BRAIN = "error_brain"
    ERROR_BRAIN_REPLY = "error_brain_reply"
    ERROR_SYSTEM = "error_system"
    ERROR_DEV_AGENT = "error_dev_agent"

    @property
    def is_error(self) -> bool:
        """An error state.

        Examples
        --------
        >>> ManagerState.ERROR_BRAIN.is_error, ManagerState.IDLE.is_error
        (True, False)
        """
        return self.value.startswith("error_")

    @property
    def in_task(self) -> bool:
        """A task is under way in this state (a crash here leaves it to resume).

        Examples
        --------
        >>> ManagerState.WAITING_DEV_REPORT.in_task, ManagerState.TASK_COMPLETE.in_task
        (True, False)
        """
        return self in _IN_TASK


_IN_TASK: t.Final = frozenset(
    {
        ManagerState.CALLING_BRAIN,
        ManagerState.WAITING_DEV_REPORT,
        ManagerState.PROCESSING_REPORT,
        ManagerState.SUMMARIZING_CONTEXT,
    }
)

_S = ManagerState
# Leaving a task (stop, a new project) is allowed from every state where one can be running;
# pausing (Ctrl-C) from every state of a running task.
_LEAVE: t.Final = frozenset({_S.PROJECT_SELECTED, _S.LOADING_PROJECT})

TRANSITIONS: t.Final[t.Mapping[ManagerState, frozenset[ManagerState]]] = {
    _S.IDLE: frozenset({_S.LOADING_PROJECT}),
    _S.LOADING_PROJECT: frozenset({_S.PROJECT_SELECTED, _S.ERROR_PROJECT}),
    _S.PROJECT_SELECTED: frozenset({_S.CALLING_BRAIN, _S.LOADING_PROJECT}),
    _S.CALLING_BRAIN: frozenset(
        {
            _S.WAITING_DEV_REPORT,
            _S.PAUSED_WAITING_USER_INPUT,
            _S.TASK_COMPLETE,
            _S.ERROR_SYSTEM,
            _S.ERROR_BRAIN,
            _S.ERROR_BRAIN_REPLY,
        }
    )
    | _LEAVE,
    _S.WAITING_DEV_REPORT: frozenset(
        {_S.PROCESSING_REPORT, _S.ERROR_DEV_AGENT, _S.PAUSED_WAITING_USER_INPUT}
    )
    | _LEAVE,
    _S.PROCESSING_REPORT: frozenset(
        {_S.CALLING_BRAIN, _S.SUMMARIZING_CONTEXT, _S.PAUSED_WAITING_USER_INPUT}
    )
    | _LEAVE,
    _S.SUMMARIZING_CONTEXT: frozenset(
        {_S.CALLING_BRAIN, _S.ERROR_BRAIN, _S.PAUSED_WAITING_USER_INPUT}
    )
    | _LEAVE,
    _S.PAUSED_WAITING_USER_INPUT: frozenset({_S.CALLING_BRAIN}) | _LEAVE,
    _S.TASK_COMPLETE: frozenset({_S.CALLING_BRAIN}) | _LEAVE,
    _S.ERROR_PROJECT: frozenset({_S.LOADING_PROJECT}),
    _S.ERROR_BRAIN: frozenset({_S.CALLING_BRAIN}) | _LEAVE,
    _S.ERROR_BRAIN_REPLY: frozenset({_S.CALLING_BRAIN}) | _LEAVE,
    _S.ERROR_SYSTEM: frozenset({_S.CALLING_BRAIN}) | _LEAVE,
    _S.ERROR_DEV_AGENT: frozenset({_S.CALLING_BRAIN}) | _LEAVE,
}
"""Every allowed move: ``TRANSITIONS[a]`` holds the states ``a`` may go to."""


def check_transition(current: ManagerState | str, target: ManagerState | str) -> ManagerState:
    """Return ``target`` as a state if ``current`` may move to it; raise otherwise.

    Raises
    ------
    ManagerStateError
        The move is not in :data:`TRANSITIONS` (or a state name is unknown).

    Examples
    --------
    >>> check_transition("project_selected", "calling_brain").name
    'CALLING_BRAIN'
    >>> check_transition("idle", "task_complete")
    Traceback (most recent call last):
    ...
    politerm.errors.ManagerStateError: manager cannot go from idle to task_complete
    """
    try:
        a, b = ManagerState(current), ManagerState(target)
    except ValueError as exc:
        msg = f"unknown manager state: {exc}"
        raise ManagerStateError(msg) from None
    if b not in TRANSITIONS[a]:
        msg = f"manager cannot go from {a.value} to {b.value}"
        raise ManagerStateError(msg)
    return b
