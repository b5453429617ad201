"""``poli completion bash|zsh|fish``: print or install the shell completion script."""

from __future__ import annotations

import pathlib

import click

from politerm.cli._complete import SHELLS, script

_WHERE = {
    "bash": (".local/share/bash-completion/completions/poli", "open a new shell"),
    "zsh": (
        ".zfunc/_poli",
        "add `fpath=(~/.zfunc $fpath); autoload -U compinit; compinit` to ~/.zshrc",
    ),
    "fish": (".config/fish/completions/poli.fish", "open a new shell"),
}


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.option("--install", is_flag=True, help="Write it where SHELL looks for completions.")
def command(shell: str, install: bool) -> None:
    """Print the completion script for SHELL (or --install it).

    It completes commands and options, and the names of the current project's pipelines,
    pipeline runs (--run-id), tasks and agents. Without --install, load it for this shell
    only with e.g. ``eval "$(poli completion bash)"``.
    """
    text = script(shell)
    if not install:
        click.echo(text)
        return
    from politerm._internal.private import write_private

    rel, then = _WHERE[shell]
    path = pathlib.Path.home() / rel
    write_private(path, text + "\n")
    click.echo(f"wrote {path}; {then}")
