"""Session records as JSONL: ``poli export --jsonl`` and ``poli import``.

One record per line, the shape of :meth:`~politerm.store.epics.SessionRecord.to_json` (with
``record_schema``). Exported text is redacted again on the way out, imported text on the way
in, so a file written by an older politerm cannot smuggle a secret into the store.
"""

from __future__ import annotations

import json
import typing as t

from politerm.errors import StoreError
from politerm.store.epics import SessionRecord

if t.TYPE_CHECKING:
    from collections.abc import Iterable

    from politerm.store.epics import EpicStore


def export_lines(
    store: EpicStore, *, run_id: str | None = None, epic: str | None = None
) -> t.Iterator[str]:
    """One JSON line (no newline) per record, oldest first, redacted."""
    for record in store.list_records(run_id=run_id, epic=epic):
        data = store.redactor.redact_json(record.to_json())
        yield json.dumps(data, ensure_ascii=False, sort_keys=True)


def parse_lines(lines: Iterable[str], *, source: str = "<input>") -> list[SessionRecord]:
    """Records from JSONL lines; blank lines are skipped.

    Raises
    ------
    StoreError
        Naming ``source`` and the line, for a line that is not a record.
    """
    records: list[SessionRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            msg = f"{source}:{number}: not JSON: {exc}"
            raise StoreError(msg) from None
        if not isinstance(data, dict):
            msg = f"{source}:{number}: not a JSON object"
            raise StoreError(msg)
        try:
            records.append(SessionRecord.from_json(data))
        except StoreError as exc:
            msg = f"{source}:{number}: {exc}"
            raise StoreError(msg) from None
    return records
