"""The omnibus summary: one commit narrative of everything an epic's sessions did.

The epic's records are read newest first; their commit summaries and bodies are packed into
prompt-sized chunks; each chunk goes to a summarizer session; the partial summaries are
combined (chunked again when they do not fit one prompt) until one narrative is left.
"""

from __future__ import annotations

import typing as t
import uuid

from politerm.epic.prompt import layer, render, report_instructions
from politerm.errors import EpicError

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from politerm.config import EpicConfig
    from politerm.protocol.report import Report
    from politerm.store.epics import SessionRecord

SEPARATOR = "\n\n---\n\n"
#: Combining rounds before giving up (each round shrinks the list at least by one).
MAX_ROUNDS = 20


def split_text(text: str, limit: int) -> list[str]:
    r"""Cut ``text`` into pieces of at most ``limit`` characters, at line ends when possible.

    Examples
    --------
    >>> split_text("aaaa\nbbbb\ncc", 9)
    ['aaaa\nbbbb', 'cc']
    >>> split_text("x" * 10, 4)
    ['xxxx', 'xxxx', 'xx']
    """
    pieces: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > limit:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(line[:limit])
            line = line[limit:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) <= limit:
            current = candidate
        else:
            pieces.append(current)
            current = line
    if current:
        pieces.append(current)
    return pieces


def chunk_texts(texts: Sequence[str], limit: int) -> list[str]:
    r"""Pack ``texts`` in order into chunks of at most ``limit`` characters.

    A text longer than ``limit`` is split on its own (:func:`split_text`).

    Examples
    --------
    >>> chunk_texts(["aaa", "bbb", "ccc"], 3 + len(SEPARATOR) + 3)
    ['aaa\n\n---\n\nbbb', 'ccc']
    """
    if limit < 1:
        msg = f"chunk limit must be positive, got {limit}"
        raise ValueError(msg)
    chunks: list[str] = []
    current = ""
    for text in texts:
        for piece in split_text(text, limit) if len(text) > limit else [text]:
            candidate = f"{current}{SEPARATOR}{piece}" if current else piece
            if len(candidate) <= limit:
                current = candidate
            else:
                chunks.append(current)
                current = piece
    if current:
        chunks.append(current)
    return chunks


def record_text(record: SessionRecord) -> str:
    """What a record contributes to the summary: item, commit summary, body, escalation."""
    head = f"[{record.item_id or record.id}] {record.status}: {record.commit_summary or ''}"
    parts = [head.rstrip()]
    if record.commit_body:
        parts.append(record.commit_body.strip())
    if record.escalation:
        parts.append(f"Escalation: {record.escalation}")
    return "\n".join(parts)


def report_text(report: Report) -> str:
    """A partial summary as the next round reads it."""
    return f"{report.commit_msg}\n{report.details}".strip()


class SummaryPlan(t.NamedTuple):
    """What a summary took: the final report and the number of summarizer sessions."""

    report: Report
    sessions: int


async def summarize(
    epic: str,
    records: Sequence[SessionRecord],
    *,
    limit: int,
    run: Callable[[str, str], Awaitable[Report]],
    config: EpicConfig | None = None,
) -> SummaryPlan:
    """Summarize ``records`` (newest first) with summarizer sessions.

    Parameters
    ----------
    epic
        Named in the prompts.
    records
        The epic's session records, newest first.
    limit
        Most characters one prompt may have (template, chunk and report instructions).
    run
        Runs one summarizer session: ``run(prompt, session_id)`` → its report.
    config
        For overridden prompt layers.

    Raises
    ------
    EpicError
        Nothing to summarize, or ``limit`` leaves no room for any text.
    """
    texts = [record_text(r) for r in records if r.commit_summary]
    if not texts:
        msg = f"epic {epic!r} has no finished sessions to summarize"
        raise EpicError(msg)
    sessions = 0

    async def one(template: str, chunk: str, values: dict[str, object]) -> Report:
        nonlocal sessions
        sid = str(uuid.uuid4())
        body = render(template, {**values, "epic": epic, "chunk": chunk}).strip()
        prompt = f"{body}\n\n{report_instructions(config, sid)}"
        sessions += 1
        return await run(prompt, sid)

    def budget(template: str, values: Mapping[str, object]) -> int:
        sid = "00000000-0000-0000-0000-000000000000"
        empty = render(template, {**values, "epic": epic, "chunk": ""}).strip()
        room = limit - len(empty) - len(report_instructions(config, sid)) - 4
        if room < 40:
            msg = f"summary_chunk_chars={limit} leaves no room for text in the summary prompt"
            raise EpicError(msg)
        return room

    summary_t, combine_t = layer("summary", config), layer("combine", config)
    wide = {"part": 999, "parts": 999}
    chunks = chunk_texts(texts, budget(summary_t, wide))
    reports = [
        await one(summary_t, c, {"part": i + 1, "parts": len(chunks)}) for i, c in enumerate(chunks)
    ]
    for _ in range(MAX_ROUNDS):
        if len(reports) == 1:
            return SummaryPlan(reports[0], sessions)
        partials = [report_text(r) for r in reports]
        room = budget(combine_t, {"count": len(partials)})
        reports = [
            await one(combine_t, c, {"count": c.count(SEPARATOR) + 1})
            for c in chunk_texts(partials, room)
        ]
    msg = f"partial summaries did not combine into one within {MAX_ROUNDS} rounds"
    raise EpicError(msg)
