"""The message contract between agents: tagged ``[[POLI:MSG ...]]`` blocks and their parser.

An agent ends its reply with::

    [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1","nonce":"a1b2c3"}]]
    <PLAN>
    1. do the thing
    </PLAN>
    [[/POLI:MSG]]

:class:`BlockParser` finds such blocks in rendered screens (:meth:`BlockParser.scan_screen`)
and append-only text (:meth:`BlockParser.feed`); :mod:`.transcript` reads the CLIs' own
logs; :mod:`.primer` renders the instructions that ask an agent for a block.
"""

from __future__ import annotations

import importlib
import typing as t

if t.TYPE_CHECKING:
    from politerm.protocol.block import (
        INNER_TAGS,
        Block,
        MessageType,
        normalise_body,
        render_block,
        resolve_file_body,
    )
    from politerm.protocol.parser import (
        BlockParser,
        ParseResult,
        Rejection,
        clean_line,
        extract_body,
        header_schema,
        is_close_line,
        is_header_line,
        is_prompt_echo,
        last_prompt_line,
        parse_blocks,
        parse_header,
        strip_gutter,
        validate_header,
    )
    from politerm.protocol.primer import header_template, inner_tag, new_nonce, render_primer
    from politerm.protocol.transcript import (
        CrossCheck,
        TranscriptFormat,
        TranscriptTail,
        aider_assistant_lines,
        claude_texts,
        codex_texts,
        cross_check,
        read_transcript,
    )

# Imported on first use: the views import ``protocol.header`` for its line cleaning and
# should not pay for the parser, the primer and the transcript readers to start.
_LAZY = {
    "INNER_TAGS": "block",
    "Block": "block",
    "MessageType": "block",
    "normalise_body": "block",
    "render_block": "block",
    "resolve_file_body": "block",
    "BlockParser": "parser",
    "ParseResult": "parser",
    "Rejection": "parser",
    "clean_line": "parser",
    "extract_body": "parser",
    "header_schema": "parser",
    "is_close_line": "parser",
    "is_header_line": "parser",
    "is_prompt_echo": "parser",
    "last_prompt_line": "parser",
    "parse_blocks": "parser",
    "parse_header": "parser",
    "strip_gutter": "parser",
    "validate_header": "parser",
    "header_template": "primer",
    "inner_tag": "primer",
    "new_nonce": "primer",
    "render_primer": "primer",
    "CrossCheck": "transcript",
    "TranscriptFormat": "transcript",
    "TranscriptTail": "transcript",
    "aider_assistant_lines": "transcript",
    "claude_texts": "transcript",
    "codex_texts": "transcript",
    "cross_check": "transcript",
    "read_transcript": "transcript",
}


def __getattr__(name: str) -> t.Any:
    # As :func:`politerm._internal.lazy.lazy_names`, which this layer may not import.
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "INNER_TAGS",
    "Block",
    "BlockParser",
    "CrossCheck",
    "MessageType",
    "ParseResult",
    "Rejection",
    "TranscriptFormat",
    "TranscriptTail",
    "aider_assistant_lines",
    "claude_texts",
    "clean_line",
    "codex_texts",
    "cross_check",
    "extract_body",
    "header_schema",
    "header_template",
    "inner_tag",
    "is_close_line",
    "is_header_line",
    "is_prompt_echo",
    "last_prompt_line",
    "new_nonce",
    "normalise_body",
    "parse_blocks",
    "parse_header",
    "read_transcript",
    "render_block",
    "render_primer",
    "resolve_file_body",
    "strip_gutter",
    "validate_header",
]
