"""Shared bits of the messaging commands (send, reply, inbox, msg, panes, mcp)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import typing as t

import click

from politerm._internal.clock import time_of_day
from politerm.cli._common import load, open_store
from politerm.messaging.service import Messenger
from politerm.project import ENV_CONFIG

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.store.mail import Mail


def config_path_of(config_path: pathlib.Path | None) -> pathlib.Path | None:
    """``--config``, else the agent pane's ``POLI_CONFIG``, else none (./poli.toml)."""
    if config_path is not None:
        return config_path
    from_env = os.environ.get(ENV_CONFIG)
    return pathlib.Path(from_env) if from_env else None


def load_messaging(config_path: pathlib.Path | None) -> Config:
    """The configuration of the session a messaging command works on."""
    return load(config_path_of(config_path))


@contextlib.contextmanager
def messenger(config: Config) -> t.Iterator[Messenger]:
    """A :class:`Messenger` over the configuration's store, closed afterwards."""
    with open_store(config) as store:
        yield Messenger(config, store)


def read_text_arg(value: str) -> str:
    """``-`` reads standard input (bytes decoded as UTF-8, kept exactly); else the text."""
    if value == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="surrogateescape")
    return value


def mail_line(mail: Mail) -> str:
    """One table line for a message."""
    reason = f"  ({' '.join((mail.reason or '').split())[:80]})" if mail.reason else ""
    return (
        f"{mail.id:<16} {mail.kind.value:<8} {mail.state.value:<10} "
        f"{mail.sender}→{mail.recipient} {mail.capability.value:<8} "
        f"{mail.size:>8}B {time_of_day(mail.created)}{reason}"
    )


def echo_json(value: t.Any) -> None:
    """Print ``value`` as indented JSON."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))
