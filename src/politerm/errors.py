"""The one exception tree of politerm.

Every error politerm raises on purpose derives from :class:`PolitermError`; the CLI turns
them into one-line messages and exit codes. Errors about bad arguments or input also derive
from :class:`ValueError`. "Could not look" (:class:`TmuxLookupError`) is kept apart from
"is absent" (:class:`PaneNotFound`, :class:`ServerNotRunning`).
"""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    import pathlib


class PolitermError(Exception):
    """Root of every error politerm raises on purpose."""


class ConfigError(PolitermError, ValueError):
    """A configuration file, key or environment variable holds a bad value."""


class IdError(PolitermError, ValueError):
    """A task or work item id has characters or a length politerm does not accept."""


# --- tmux layer -------------------------------------------------------------------------


class TmuxError(PolitermError):
    """Something went wrong talking to tmux."""


class TmuxNotFound(TmuxError):
    """The tmux binary is missing from PATH or too old."""


class ServerNotRunning(TmuxError):
    """The private tmux server is not running (never started, or it died)."""


class SessionNotFound(TmuxError):
    """A tmux session of that name does not exist."""


class PaneNotFound(TmuxError):
    """A pane id does not exist (any more)."""

    def __init__(self, pane_id: str, detail: str = "") -> None:
        self.pane_id = pane_id
        super().__init__(f"pane {pane_id} not found" + (f": {detail}" if detail else ""))


class TmuxCommandError(TmuxError):
    """tmux answered a command with ``%error``."""

    def __init__(self, command: str, lines: t.Sequence[str]) -> None:
        self.command = command
        self.lines = list(lines)
        detail = "; ".join(lines) or "no detail"
        super().__init__(f"tmux command {command.split(' ', 1)[0]!r} failed: {detail}")


class TmuxLookupError(TmuxError):
    """We could not look (tmux did not answer); says nothing about whether a thing exists."""


class ControlModeError(TmuxError):
    """The control-mode connection dropped or could not be established."""


# --- agents -----------------------------------------------------------------------------


class AgentError(PolitermError):
    """An agent misbehaved or could not be driven."""


class ProfileError(AgentError, ValueError):
    """An agent profile file is malformed."""


class PromptNotDelivered(AgentError):
    """A prompt could not be confirmed as submitted to an agent."""


class AgentTimeout(AgentError):
    """A bounded wait on an agent ran out; the message says what was awaited."""


class AgentExited(AgentError):
    """The agent's process is gone."""


class AgentNotFound(AgentError, ValueError):
    """An agent's program is not on PATH; nothing was started."""


class CanaryError(AgentError):
    """``poli agents canary`` could not install or run a CLI release (the message says why)."""


# --- protocol ---------------------------------------------------------------------------


class ProtocolError(PolitermError):
    """A tagged block or report is malformed."""


class BlockRejected(ProtocolError, ValueError):
    """A candidate block was seen but is not well-formed; the message says why."""


class OldBlock(BlockRejected):
    """A block of another turn (its nonce is not this turn's): ignored, as it should be."""


class ReportError(ProtocolError):
    """A session's fenced report is wrong or missing; the message says what and where."""


# --- hook receipts --------------------------------------------------------------------


class HookError(PolitermError):
    """An agent's hook channel could not be set up or read."""


class HookLineError(HookError, ValueError):
    """A line of a hook channel is not a receipt politerm wrote; the message says where."""


# --- headless PTY -----------------------------------------------------------------------


class PtyError(PolitermError):
    """A pseudo-terminal could not be allocated or driven."""


# --- epic runs --------------------------------------------------------------------------


class EpicError(PolitermError):
    """An epic run could not go on (work items, sessions, summaries)."""


class WorkItemError(EpicError, ValueError):
    """A work item or epic does not exist, or a request about one is invalid."""


class BdError(EpicError):
    """The ``bd`` tracker failed or answered something we cannot read."""


# --- pipelines --------------------------------------------------------------------------


class PipelineError(PolitermError):
    """A pipeline could not be loaded or run."""


class PipelineSyntaxError(PipelineError, ValueError):
    """A pipeline file has a problem at a given line."""

    def __init__(self, path: str | pathlib.Path, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.detail = message
        super().__init__(f"{path}:{line}: {message}")


class PipelineInvalid(PipelineError, ValueError):
    """A pipeline file has problems; :attr:`problems` lists every one, in file order."""

    def __init__(self, problems: t.Sequence[PipelineSyntaxError]) -> None:
        self.problems = list(problems)
        first = str(self.problems[0]) if self.problems else "invalid pipeline"
        more = len(self.problems) - 1
        super().__init__(first + (f" (+{more} more)" if more > 0 else ""))


# --- store ------------------------------------------------------------------------------


class StoreError(PolitermError):
    """The run store could not be opened or written."""


class SchemaTooNew(StoreError):
    """The store was written by a newer politerm; we refuse to touch it."""


class TransitionRejected(StoreError):
    """A message or turn was asked to change state in a way the state machine forbids."""


# --- routing / tasks --------------------------------------------------------------------


class RoutingError(PolitermError):
    """The router could not move a message or finish a task."""


# --- imports from the original tools ----------------------------------------------------


class CompatError(PolitermError, ValueError):
    """A file from obi, META or PoliTerm cannot be taken over (says which file and where)."""


# --- messaging between agents -----------------------------------------------------------


class MessagingError(PolitermError):
    """A message between agents could not be sent, delivered or answered."""


class MessageNotFound(MessagingError, ValueError):
    """No message has that id."""


class RecipientNotFound(MessagingError, ValueError):
    """A message names an agent or pane that does not exist in this session."""


class UnsafeMessagePath(MessagingError, ValueError):
    """A path in a message or notification lies outside the session's message directory."""


class NotInAgentPane(MessagingError, ValueError):
    """``poli reply`` ran outside a politerm agent pane and was not told whom to answer."""


class MessageDead(MessagingError):
    """A message expired or became a dead letter; the message says why."""


# --- dashboard, web monitor, notifications ------------------------------------------------


class UiError(PolitermError):
    """The dashboard, the web monitor or a notification could not do what was asked."""


class StaleAction(UiError):
    """An action names a question that is no longer the open one (answered, or replaced)."""


class WebAssetsMissing(UiError):
    """xterm.js is not installed where the web monitor looks for it."""


class NotifyError(UiError):
    """A notification channel refused or could not be reached."""


# --- task bridge ------------------------------------------------------------------------


class BridgeError(PolitermError):
    """The task bridge could not read its queue, run a task or talk to its daemon."""


class BridgeTaskInvalid(BridgeError, ValueError):
    """A task (or a request about one) is invalid; the message names the task and why."""


class EditError(BridgeError, ValueError):
    """A file modification cannot be applied (missing file, marker, range, bad UTF-8)."""


class RunnerError(BridgeError):
    """The command runner could not start or supervise a command."""


# --- fleet (several machines, one project, work through Redis) -------------------------


class FleetError(PolitermError):
    """The fleet's Redis could not be used, or a piece of work could not go on."""


class FleetRefused(FleetError, ValueError):
    """A fleet URL or setting is refused before connecting (e.g. unauthenticated, not loopback)."""


class FleetUnavailable(FleetError):
    """Redis did not answer (down, unreachable, paused): we could not look, nothing is known."""


class FleetAuthError(FleetError):
    """Redis refused the fleet's user or password (or its ACL forbids a command)."""


class WorkInvalid(FleetError, ValueError):
    """A piece of work (its id, agent, kind or payload) is malformed; the message says why."""


class LeaseLost(FleetError):
    """A lease may no longer be used: nothing may be typed nor reported for its attempt."""


class Fenced(LeaseLost):
    """Another attempt of the work holds a newer epoch (or the work ended): this one is over."""


class LeaseExpiring(LeaseLost):
    """The lease is still current but has less time left than the margin a turn needs."""


class ResultTimeout(FleetError):
    """A bounded wait for a work's result ran out; the message names the work and its state."""


# --- manager ----------------------------------------------------------------------------


class ManagerError(PolitermError):
    """The dev manager could not go on (projects, state, the brain, the dev agent)."""


class ManagerProjectError(ManagerError, ValueError):
    """A manager project does not exist, already exists, or its path or name is bad."""


class ManagerStateError(ManagerError):
    """A state transition the manager's state machine does not allow."""


class BrainError(ManagerError):
    """The manager's brain (a model API or an agent) did not give a usable reply."""


class BrainAuthError(BrainError):
    """The brain's API rejected the key (missing, wrong or not allowed)."""


class BrainModelError(BrainError, ValueError):
    """The brain's API does not know the model name."""


class BrainTimeout(BrainError):
    """One call to the brain did not answer within the bounded timeout."""


class BrainReplyError(BrainError):
    """The brain's reply was empty or malformed, even after a retry; the message shows it."""


class DevChannelError(ManagerError):
    """The dev agent's channel (pane or files) failed; the message says which and why."""


class DevStepTimeout(DevChannelError):
    """No dev report arrived within the step timeout (the brain is told, and can re-plan)."""
