"""The seed session's ``poli status --watch``: re-query the store and redraw twice a second.

Run in a tmux window as the baseline of the session-idle benchmark
(``python -m bench._oldstatus STORE``): every 0.5 s it reads every agent's row, turn and
approval question, the tasks, the queue and the latest events, and hands a new view to a
``rich`` Live display that also refreshes on its own timer, as the seed's control window did.
"""

from __future__ import annotations

import pathlib
import sys
import time

from rich.console import Console
from rich.live import Live

from politerm.status import collect, render
from politerm.store import RunStore


def main(store_path: str) -> None:
    with RunStore.open(pathlib.Path(store_path)) as store:
        console = Console(highlight=False)
        with Live(render(collect(store)), console=console, screen=False) as live:
            while True:
                time.sleep(0.5)
                live.update(render(collect(store)))


if __name__ == "__main__":
    main(sys.argv[1])
