"""Layered prompts of epic sessions: base + epic + item + report instructions.

Each layer is a Markdown template, built in (``politerm/epic/prompts/<name>.md``) or replaced
by a file named in the config (``[epic] base_prompt = "..."`` …). Templates name values in
braces (``{session_uuid}``); only known names are replaced, so other braces stay as written.
"""

from __future__ import annotations

import importlib.resources
import re
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.config import EpicConfig
    from politerm.store.epics import WorkItem

#: Template layers, each overridable by ``[epic] <name>_prompt``.
LAYERS: tuple[str, ...] = ("base", "epic", "item", "report", "summary", "combine")

_NAME = re.compile(r"\{([a-z_]+)\}")


def builtin_layer(name: str) -> str:
    """The built-in template of a layer (also ``note``, the soft-stop operator note)."""
    path = importlib.resources.files("politerm.epic") / "prompts" / f"{name}.md"
    return path.read_text(encoding="utf-8")


def layer(name: str, config: EpicConfig | None = None) -> str:
    """The template of a layer: the configured file if any, else the built-in one."""
    if config is not None and name in LAYERS:
        path = getattr(config, f"{name}_prompt")
        if path is not None:
            return t.cast("str", path.read_text(encoding="utf-8"))
    return builtin_layer(name)


def render(template: str, values: Mapping[str, object]) -> str:
    """Replace ``{name}`` for every name in ``values``; leave other braces alone.

    Examples
    --------
    >>> render('id={id} json={"a": 1} {unknown}', {"id": 7})
    'id=7 json={"a": 1} {unknown}'
    """

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        return str(values[key]) if key in values else m.group(0)

    return _NAME.sub(sub, template)


def item_prompt(
    config: EpicConfig | None,
    *,
    item: WorkItem,
    session_uuid: str,
    repo_root: str,
    epic_title: str = "",
    epic_description: str = "",
) -> str:
    """The whole prompt of one item's session, layers joined by blank lines."""
    values = {
        "session_uuid": session_uuid,
        "repo_root": repo_root,
        "epic": item.epic,
        "epic_title": f" ({epic_title})" if epic_title else "",
        "epic_description": epic_description,
        "item_id": item.id,
        "item_title": item.title,
        "item_body": item.body,
        "priority": item.priority,
    }
    parts = [render(layer(name, config), values).strip() for name in ("base", "epic", "item")]
    parts.append(report_instructions(config, session_uuid))
    # No trailing newline: a line-based input box would show an empty last line.
    return "\n\n".join(p for p in parts if p)


def report_instructions(config: EpicConfig | None, session_uuid: str) -> str:
    """The report layer for one session."""
    return render(layer("report", config), {"session_uuid": session_uuid}).strip()


def operator_note(session_uuid: str) -> str:
    """What a soft stop delivers to the agent."""
    return render(builtin_layer("note"), {"session_uuid": session_uuid}).strip()
