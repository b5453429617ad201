"""The prompts politerm types into agents, as overridable templates.

Each template is ``str.format`` text with the fields ``id``, ``request``, ``body``, ``nonce``,
``sender``, ``recipient``, ``reply_to``, ``reply_type`` and ``primer`` (the block
instructions). Overrides are files named in ``[templates]`` of ``poli.toml``. The
``poliseed`` contract starts from the original PoliTerm's prompts instead
(:data:`politerm.protocol.contract.POLISEED_TEMPLATES`).
"""

from __future__ import annotations

import pathlib
import string
import typing as t

from politerm.errors import ConfigError
from politerm.protocol.primer import render_primer

if t.TYPE_CHECKING:
    from collections.abc import Mapping

TEMPLATE_NAMES = ("task", "plan", "result", "answer", "nudge", "retry", "message")

DEFAULT_TEMPLATES: dict[str, str] = {
    "task": (
        "TASK_ID={id}\n"
        "User request:\n"
        "{request}\n"
        "\n"
        "Make a plan for the EXECUTER agent, who will carry it out.\n"
        "{primer}\n"
        "Reply with exactly one tagged block addressed to {reply_to} with id={id} (nonce={nonce})."
    ),
    "plan": (
        "You received a PLANNER plan block:\n"
        "<PLAN>\n"
        "{body}\n"
        "</PLAN>\n"
        "TASK_ID={id}\n"
        "\n"
        "Carry out the plan. You may print status blocks while you work.\n"
        "{primer}\n"
        "When done, reply with a RESULT block back to {reply_to} with id={id} (nonce={nonce})."
    ),
    "result": (
        "EXECUTER replied:\n"
        "<RESULT>\n"
        "{body}\n"
        "</RESULT>\n"
        "TASK_ID={id}\n"
        "\n"
        "If the task is complete, reply with a final block to USER with a short report; "
        "otherwise send another plan block to EXECUTER.\n"
        "{primer}\n"
        "Use id={id} (nonce={nonce})."
    ),
    "answer": (
        "The user answered your question:\n"
        "{body}\n"
        "TASK_ID={id}\n"
        "\n"
        "Continue the task.\n"
        "{primer}\n"
        "Use id={id} (nonce={nonce})."
    ),
    "nudge": "If finished, emit the tagged block now. TASK_ID={id} (nonce={nonce}).",
    "retry": (
        "No tagged block has arrived for task {id}. If you are finished, emit the tagged "
        "block now; if not, finish and then emit it. TASK_ID={id} (nonce={nonce})."
    ),
    "message": (
        "{sender} sent you a {type} block:\n{body}\nTASK_ID={id}\n\n{primer}\n"
        "Use id={id} (nonce={nonce})."
    ),
}

# What each prompt asks the recipient to send back: (to, type, what the body holds).
REPLY_SHAPES: dict[str, tuple[str, str, str]] = {
    "task": ("EXECUTER", "plan", "your numbered plan"),
    "plan": ("PLANNER", "result", "what you did and what you found"),
    "result": ("USER", "final", "your final report (or a plan block to EXECUTER)"),
    "answer": ("EXECUTER", "plan", "your next message"),
    "message": ("PLANNER", "result", "your reply"),
}


class Templates:
    """The effective templates: defaults, with per-name overrides from files."""

    def __init__(
        self, overrides: Mapping[str, str] | None = None, *, contract: str = "politerm"
    ) -> None:
        from politerm.protocol.contract import POLISEED_TEMPLATES, Contract

        base = POLISEED_TEMPLATES if contract == Contract.POLISEED.value else DEFAULT_TEMPLATES
        self.texts = dict(base)
        for name, text in (overrides or {}).items():
            if name not in DEFAULT_TEMPLATES:
                known = ", ".join(TEMPLATE_NAMES)
                msg = f"templates.{name}: unknown template (known: {known})"
                raise ConfigError(msg)
            _check_fields(name, text)
            self.texts[name] = text

    @classmethod
    def from_files(
        cls, files: Mapping[str, str | pathlib.Path], *, contract: str = "politerm"
    ) -> Templates:
        """Load overrides from template files (over the ``contract``'s prompts)."""
        texts = {}
        for name, path in files.items():
            try:
                texts[name] = pathlib.Path(path).read_text()
            except OSError as exc:
                msg = f"templates.{name}: cannot read {path}: {exc.strerror}"
                raise ConfigError(msg) from None
        return cls(texts, contract=contract)

    def render(
        self,
        name: str,
        *,
        msg_id: str,
        nonce: str,
        body: str = "",
        request: str = "",
        sender: str = "",
        recipient: str = "",
        msg_type: str = "",
        reply_to: str | None = None,
        reply_type: str | None = None,
        file_ref: str | None = None,
    ) -> str:
        """Render one prompt.

        Examples
        --------
        >>> text = Templates().render("task", msg_id="T1", nonce="ab12cd", request="Say hi")
        >>> text.splitlines()[:3]
        ['TASK_ID=T1', 'User request:', 'Say hi']
        >>> text.splitlines()[-1]
        'Reply with exactly one tagged block addressed to EXECUTER with id=T1 (nonce=ab12cd).'
        """
        shape_to, shape_type, what = REPLY_SHAPES.get(name, ("PLANNER", "result", "your reply"))
        to = reply_to or shape_to
        typ = reply_type or shape_type
        primer = render_primer(to, typ, msg_id, nonce, what=what, file_ref=file_ref)
        return self.texts[name].format(
            id=msg_id,
            nonce=nonce,
            body=body,
            request=request,
            sender=sender,
            recipient=recipient,
            type=msg_type,
            reply_to=to,
            reply_type=typ,
            primer=primer,
        )


def _check_fields(name: str, text: str) -> None:
    allowed = {
        "id", "nonce", "body", "request", "sender", "recipient", "type",
        "reply_to", "reply_type", "primer",
    }  # fmt: skip
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f}
    except ValueError as exc:
        msg = f"templates.{name}: bad template: {exc}"
        raise ConfigError(msg) from None
    unknown = fields - allowed
    if unknown:
        msg = f"templates.{name}: unknown field(s) {sorted(unknown)} (allowed: {sorted(allowed)})"
        raise ConfigError(msg)
