r"""Message contracts: politerm's own, and the original PoliTerm's (``poliseed``).

politerm's contract gives every turn a nonce: the prompt names it and a block must carry it,
so an echoed or stale block can never be taken for the reply. The original PoliTerm had no
nonce. Its blocks are ``[[POLI:MSG {"to":…,"type":…,"id":…}]] … [[/POLI:MSG]]`` and its prompts
use its own sentences, which programs and primers written for it wait for. With
``[routing] contract = "poliseed"`` politerm speaks that contract: the prompts below, primers
that show the original's block shape, and no nonce.

Without a nonce, echo safety comes from *position* and the *task id*: only what the agent
printed after the turn's prompt counts (:func:`after_prompt` finds where the echo of the prompt
ends, so a forwarded block inside the prompt is never read back), and a block must carry the
turn's task id. The same two facts let the default contract accept a block whose nonce a model
dropped (:func:`nonceless`), with a warning event instead of a silent rejection.

Status blocks may carry their own ids, ``<task>-status-<n>`` (:func:`status_task`); they are
recorded for that task.
"""

from __future__ import annotations

import enum
import re
import typing as t

from politerm.protocol.parser import BlockParser, clean_line, common_prefix

if t.TYPE_CHECKING:
    from politerm.protocol.block import Block


class Contract(str, enum.Enum):
    """Which message contract the router speaks."""

    POLITERM = "politerm"
    POLISEED = "poliseed"


#: The original PoliTerm's prompts, in its wording (``str.format`` fields as in templates).
POLISEED_TEMPLATES: dict[str, str] = {
    "task": (
        "TASK_ID={id}\n"
        "\n"
        "User request:\n"
        "{request}\n"
        "\n"
        "Please produce exactly one tagged block addressed to EXECUTER with id={id}."
    ),
    "plan": (
        "You received a PLANNER plan block:\n"
        "\n"
        '[[POLI:MSG {{"to":"EXECUTER","type":"plan","id":"{id}"}}]]\n'
        "<PLAN>\n"
        "{body}\n"
        "</PLAN>\n"
        "[[/POLI:MSG]]\n"
        "\n"
        "Execute the plan. When done, emit a RESULT block back to PLANNER with id={id}."
    ),
    "result": (
        "EXECUTER replied:\n"
        "\n"
        '[[POLI:MSG {{"to":"PLANNER","type":"result","id":"{id}"}}]]\n'
        "<RESULT>\n"
        "{body}\n"
        "</RESULT>\n"
        "[[/POLI:MSG]]\n"
        "\n"
        "Now produce a concise final report for the user (no new POLI blocks)."
    ),
    "answer": (
        "The user answered your question:\n"
        "{body}\n"
        "\n"
        "Please produce exactly one tagged block addressed to {reply_to} with id={id}."
    ),
    "nudge": "# Reminder: Please emit your tagged response block if you're finished.",
    "retry": (
        "# Reminder: no tagged block has arrived yet. If you are finished, emit your tagged "
        "response block with id={id} now."
    ),
    "message": (
        "You received a {type} block from {sender}:\n"
        "\n"
        "{body}\n"
        "\n"
        "Please produce exactly one tagged block addressed to {reply_to} with id={id}."
    ),
}

_STATUS_ID = re.compile(r"^(?P<task>.+)-status-\d+$")


def status_task(block_id: str, task_id: str | None) -> bool:
    """Whether ``block_id`` is a status id of ``task_id`` (``<task>-status-<n>``).

    Examples
    --------
    >>> status_task("T1-status-2", "T1"), status_task("T1-status-x", "T1")
    (True, False)
    >>> status_task("T2-status-1", "T1"), status_task("T1-status-1", None)
    (False, False)
    """
    m = _STATUS_ID.match(block_id)
    return bool(m and task_id is not None and m["task"] == task_id)


def _norm(text: str) -> str:
    return " ".join(clean_line(text).split())


def after_prompt(lines: t.Sequence[str], prompt: str | None) -> int:
    r"""Index of the first line after the echo of ``prompt`` (0 when it is not on screen).

    The echo is found by the prompt's last line; a terminal may wrap it, so a screen line
    that ends with the tail of that line counts. The last match wins: the same prompt may
    sit on the screen more than once.

    Examples
    --------
    >>> screen = ["executer> You received a plan:", "[[POLI:MSG {…}]]", "Emit it back to",
    ...           "PLANNER with id=T1.", "working", "[[POLI:MSG {…}]]"]
    >>> prompt = "You received a plan:\n[[POLI:MSG {…}]]\nEmit it back to PLANNER with id=T1."
    >>> after_prompt(screen, prompt)
    4
    >>> after_prompt(screen, "not sent"), after_prompt(screen, None)
    (0, 0)
    """
    last = next((ln for ln in reversed((prompt or "").splitlines()) if ln.strip()), "")
    want = _norm(last)
    if not want:
        return 0
    found = 0
    for i, raw in enumerate(lines):
        line = _norm(raw)
        k = min(len(want), len(line), 24)
        if k >= min(len(want), 8) and line.endswith(want[-k:]):
            found = i + 1
    return found


class AfterPrompt:
    """:func:`after_prompt` over a turn's growing window, looking only at what changed.

    The window's lines up to where they first differ from the last call's keep their
    matches: the last one found stands while it lies in that part, and only the lines after
    it are searched again.

    Examples
    --------
    >>> find = AfterPrompt()
    >>> find(["> do it", "working"], "do it"), find(["> do it", "working", "> do it"], "do it")
    (1, 3)
    """

    def __init__(self) -> None:
        self._prompt: str | None = None
        self._lines: t.Sequence[str] = ()
        self._found = 0

    def __call__(self, lines: t.Sequence[str], prompt: str | None) -> int:
        """:func:`after_prompt` of ``lines`` (kept, as the next call's reference)."""
        agree = 0
        if prompt == self._prompt:
            agree = common_prefix(lines, self._lines)
        # The last match before ``agree`` is the last one found, if that lies before it.
        if agree and self._found <= agree:
            later = after_prompt(lines[agree:], prompt)
            found = agree + later if later else self._found
        else:
            found = after_prompt(lines, prompt)
        self._prompt, self._lines, self._found = prompt, lines, found
        return found


def nonceless(
    lines: t.Sequence[str], task_id: str | None, parser: BlockParser | None = None
) -> list[Block]:
    """Complete blocks in ``lines`` that carry no nonce and the turn's task id.

    ``lines`` must be only what the agent printed after the turn's prompt: with that, and the
    task id, such a block cannot be an echo or a stale answer. A ``parser`` kept for the
    turn (made with ``nonce=None``) reports each block once and parses only what changed
    since its last scan; without one, every call parses all of ``lines``.

    Examples
    --------
    >>> screen = ['[[POLI:MSG {"to":"PLANNER","type":"result","id":"T1"}]]', "<RESULT>",
    ...           "done", "</RESULT>", "[[/POLI:MSG]]"]
    >>> [(b.type, b.id, b.nonce) for b in nonceless(screen, "T1")]
    [('result', 'T1', None)]
    >>> nonceless(screen, "T2")
    []
    """
    if task_id is None:
        return []
    parser = parser or BlockParser(nonce=None, detect_echo=True)
    return [b for b in parser.scan_screen(lines) if b.nonce is None and b.id == task_id]


def nonce_required(require_nonce: bool, contract: str) -> bool:
    """Whether blocks must carry the turn's nonce: never in the ``poliseed`` contract.

    Examples
    --------
    >>> nonce_required(True, "politerm"), nonce_required(True, "poliseed")
    (True, False)
    """
    return require_nonce and contract != Contract.POLISEED.value
