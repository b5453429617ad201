"""Taking over an obi setup: ``obi.toml`` into poli.toml, obi's JSONL results log into records.

obi (one interactive Codex session per bead) keeps its settings in ``obi.toml`` -- a
``[codex]`` table (``binary``, ``model``, ``sandbox``, ``approval``, ``extra_args``), a
``base_prompt``, per-epic ``prompt`` strings, a ``[summary]`` prompt and a ``results_log`` --
and appends one JSON object per finished session to that results log (``schema_version``
``obi.v2``, or no version for older logs).

:func:`convert_config` turns the settings into poli.toml text plus prompt files (politerm's
prompts are files); :func:`ledger_records` turns the results log into
:class:`~politerm.store.epics.SessionRecord` values that ``poli import`` stores.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import tomllib
import typing as t

from politerm.errors import CompatError
from politerm.store.epics import RecordKind, SessionRecord, SessionStatus

if t.TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

#: obi's results log lines carry this schema (older lines carry none).
LEDGER_SCHEMA = "obi.v2"

_NANOS = re.compile(r"(\.\d{6})\d+")
_CODEX_KEYS = frozenset({"binary", "model", "sandbox", "approval", "extra_args"})


@dataclasses.dataclass(frozen=True)
class ConvertedConfig:
    """poli.toml text for an obi.toml, and the prompt files it refers to.

    Attributes
    ----------
    toml
        The ``[epic]`` configuration (with comments for what has no politerm equivalent).
    prompts
        File name -> prompt text, to be written into the prompts directory.
    results_log
        obi's results log path, if the file set one (import it with ``poli import``).
    """

    toml: str
    prompts: dict[str, str]
    results_log: str | None


def _s(value: str) -> str:
    r"""A TOML basic string (JSON's escapes are TOML's).

    Examples
    --------
    >>> print(_s('a "b"\n'))
    "a \"b\"\n"
    """
    return json.dumps(value, ensure_ascii=False)


def _table(data: t.Any, key: str, source: str) -> dict[str, t.Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        msg = f"{source}: {key} must be a table"
        raise CompatError(msg)
    return value


def _str(data: dict[str, t.Any], key: str, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        msg = f"{where}.{key} must be a string"
        raise CompatError(msg)
    return value


def codex_command(codex: dict[str, t.Any], where: str) -> list[str]:
    """The interactive codex command line obi's ``[codex]`` table describes.

    obi runs ``codex exec``; politerm drives the interactive TUI, so ``exec`` is left out and
    the prompt is pasted rather than passed as an argument.

    Examples
    --------
    >>> codex_command({"model": "o3", "approval": "never", "extra_args": ["--x"]}, "codex")
    ['codex', '--model', 'o3', '--ask-for-approval', 'never', '--x']
    """
    unknown = set(codex) - _CODEX_KEYS
    if unknown:
        msg = f"{where}: unknown key(s) {', '.join(sorted(unknown))}"
        raise CompatError(msg)
    argv = [_str(codex, "binary", where) or "codex"]
    for key, flag in (
        ("model", "--model"),
        ("sandbox", "--sandbox"),
        ("approval", "--ask-for-approval"),
    ):
        value = _str(codex, key, where)
        if value:
            argv += [flag, value]
    extra = codex.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
        msg = f"{where}.extra_args must be a list of strings"
        raise CompatError(msg)
    return argv + list(extra)


def convert_config(
    text: str, *, source: str = "obi.toml", prompts_dir: str = ""
) -> ConvertedConfig:
    r"""poli.toml text for the obi settings in ``text``.

    Parameters
    ----------
    text
        The obi.toml content.
    source
        Its name, for error messages.
    prompts_dir
        Where the prompt files will be written (as the TOML should name them).

    Raises
    ------
    CompatError
        Not TOML, or a value of the wrong type (naming the file and key).

    Examples
    --------
    >>> obi = 'base_prompt = "Be brief"\n[codex]\nmodel = "o3"\n'
    >>> out = convert_config(obi, prompts_dir="p")
    >>> print(out.toml.split("\n\n", 1)[1])
    [epic]
    agent = "codex"
    base_prompt = "p/obi-base.md"
    <BLANKLINE>
    [epic.commands]
    codex = ["codex", "--model", "o3"]
    <BLANKLINE>
    >>> out.prompts
    {'obi-base.md': 'Be brief\n'}
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{source}: not TOML: {exc}"
        raise CompatError(msg) from None
    prompts: dict[str, str] = {}
    notes: list[str] = []
    base = _str(data, "base_prompt", source)
    lines = ["[epic]", 'agent = "codex"']
    prefix = f"{prompts_dir.rstrip('/')}/" if prompts_dir else ""
    if base.strip():
        prompts["obi-base.md"] = base.rstrip("\n") + "\n"
        lines.append(f"base_prompt = {_s(prefix + 'obi-base.md')}")
    summary = _table(data, "summary", source)
    if _str(summary, "prompt", f"{source}: summary").strip():
        prompts["obi-summary.md"] = summary["prompt"].rstrip("\n") + "\n"
        lines.append(f"summary_prompt = {_s(prefix + 'obi-summary.md')}")
    for key in ("max_commits", "chunk_size"):
        if key in summary:
            notes.append(
                f"summary.{key} = {summary[key]!r} has no equivalent (politerm chunks by size)"
            )
    epics = _table(data, "epic", source)
    epic_prompts: list[tuple[str, str]] = []
    for key, epic in sorted(epics.items()):
        where = f"{source}: epic.{key}"
        if not isinstance(epic, dict):
            msg = f"{where} must be a table"
            raise CompatError(msg)
        prompt = _str(epic, "prompt", where)
        if prompt.strip():
            name = f"obi-epic-{re.sub(r'[^A-Za-z0-9_.-]+', '-', key)}.md"
            prompts[name] = prompt.rstrip("\n") + "\n"
            epic_prompts.append((key, name))
        if "codex" in epic:
            override = codex_command({**_table(data, "codex", source), **epic["codex"]}, where)
            notes.append(f"epic.{key} overrides codex: {' '.join(override)}")
    if len(epic_prompts) == 1:
        lines.append(f"epic_prompt = {_s(prefix + epic_prompts[0][1])}")
    else:
        for key, name in epic_prompts:
            notes.append(f"epic.{key} prompt written to {prefix}{name} (set epic_prompt per run)")
    issues = data.get("issues outside epics")
    if isinstance(issues, dict) and _str(issues, "prompt", f"{source}: issues").strip():
        prompts["obi-issues.md"] = issues["prompt"].rstrip("\n") + "\n"
        notes.append(f"the prompt for issues outside epics was written to {prefix}obi-issues.md")
    if "confirm_before_run" in data:
        notes.append("confirm_before_run: poli go asks first; pass --yes to skip the question")
    results_log = _str(data, "results_log", source) or None
    if results_log:
        notes.append(
            f"results_log {results_log}: import its records with `poli import {results_log}`"
        )
    command = codex_command(_table(data, "codex", source), f"{source}: codex")
    lines += ["", "[epic.commands]", "codex = [" + ", ".join(_s(a) for a in command) + "]"]
    header = [f"# Imported from {source} by `poli config import-obi`."]
    header += [f"# {note}" for note in notes]
    return ConvertedConfig(
        "\n".join(header) + "\n\n" + "\n".join(lines) + "\n", prompts, results_log
    )


# --- the results log ------------------------------------------------------------------------


def is_ledger_entry(data: t.Mapping[str, t.Any]) -> bool:
    """Whether a JSON object is a line of obi's results log (not a politerm record).

    Examples
    --------
    >>> is_ledger_entry({"schema_version": "obi.v2", "session_id": "x"})
    True
    >>> is_ledger_entry({"id": "x", "record_schema": 3})
    False
    """
    if data.get("schema_version") == LEDGER_SCHEMA:
        return True
    return "record_schema" not in data and "session_id" in data and "commit_summary" in data


def _time(value: t.Any, where: str) -> float | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        msg = f"{where}: a time must be an RFC 3339 string"
        raise CompatError(msg)
    try:
        # Go writes nanoseconds; Python reads at most microseconds.
        stamp = datetime.datetime.fromisoformat(_NANOS.sub(r"\1", value))
    except ValueError:
        msg = f"{where}: not an RFC 3339 time: {value!r}"
        raise CompatError(msg) from None
    if stamp.year <= 1:
        return None  # Go's zero time: never set
    return stamp.timestamp()


def ledger_record(data: t.Mapping[str, t.Any], where: str = "<input>") -> SessionRecord:
    """One obi results-log entry as a session record.

    Raises
    ------
    CompatError
        No session id, or a status or time politerm cannot read.

    Examples
    --------
    >>> r = ledger_record({"session_id": "S", "epic_id": "E", "bead_id": "E-1",
    ...     "status": "success", "commit_summary": "Add x", "commit_details": "body",
    ...     "started_at": "2025-01-01T00:00:00Z", "completed_at": "2025-01-01T00:01:00Z"})
    >>> (r.id, r.item_id, r.status, r.finished - r.started)
    ('S', 'E-1', 'success', 60.0)
    """
    sid = str(data.get("session_id") or data.get("run_id") or "").strip()
    if not sid:
        msg = f"{where}: obi entry without a session_id"
        raise CompatError(msg)
    status = str(data.get("status") or "").strip().lower()
    if status not in {SessionStatus.SUCCESS.value, SessionStatus.NEEDS_HELP.value}:
        msg = f"{where}: obi status must be success or needs_help, got {data.get('status')!r}"
        raise CompatError(msg)
    started = _time(data.get("started_at"), where)
    finished = _time(data.get("completed_at"), where)
    flags: list[str] = []
    for key, flag in (("codex_sandbox", "--sandbox"), ("codex_approval", "--ask-for-approval")):
        if data.get(key):
            flags += [flag, str(data[key])]
    flags += [str(x) for x in data.get("codex_extra_args") or ()]
    return SessionRecord(
        id=sid,
        kind=RecordKind.SESSION.value,
        epic=str(data.get("epic_id") or data.get("epic_key") or "obi"),
        status=status,
        queued=started or finished or 0.0,
        run_id=str(data.get("run_id") or sid),
        repo_root=str(data.get("repo_root") or ""),
        item_id=str(data["bead_id"]) if data.get("bead_id") else None,
        agent_binary=str(data.get("codex_binary") or "codex"),
        model=str(data["codex_model"]) if data.get("codex_model") else None,
        flags=tuple(flags),
        commit_summary=str(data.get("commit_summary") or "") or None,
        commit_body=str(data.get("commit_details") or "") or None,
        started=started,
        finished=finished,
        transcript_path=str(data["transcript_path"]) if data.get("transcript_path") else None,
        config_hash=str(data.get("config_digest") or ""),
        redaction="redacted (obi)" if data.get("redacted") else "clean",
        escalation=str(data.get("escalation") or "") or None,
    )


def ledger_records(lines: Iterable[str], *, source: str = "<input>") -> list[SessionRecord]:
    """Session records from obi results-log lines (blank lines skipped).

    Raises
    ------
    CompatError
        Naming ``source`` and the line, for a line that is not an obi entry.
    """
    out: list[SessionRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            data = json.loads(line)
        except ValueError as exc:
            msg = f"{where}: not JSON: {exc}"
            raise CompatError(msg) from None
        if not isinstance(data, dict) or not is_ledger_entry(data):
            msg = f"{where}: not an obi results-log entry"
            raise CompatError(msg)
        out.append(ledger_record(data, where))
    return out


def write_prompts(converted: ConvertedConfig, directory: Path) -> list[Path]:
    """Write the prompt files (0600, in a 0700 directory); returns their paths."""
    from politerm.store.db import DIR_MODE, FILE_MODE

    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    paths = []
    for name, text in converted.prompts.items():
        path = directory / name
        path.touch(mode=FILE_MODE)
        path.chmod(FILE_MODE)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
