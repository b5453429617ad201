"""The fake agent's key decoder on big pastes: time per MiB stays flat as pastes grow.

A bracketed paste arrives in 4 KiB reads; a decoder that rescans what it holds on every read
is quadratic and a 1 MiB prompt then freezes the fake agent. Each row decodes one paste of
its size, fed in 4095-byte reads; ``x per MiB`` is the 64 KiB row's time per MiB over this
row's (about 1 when linear, falling with size when not). The check that the paste comes out
whole is ``tests/test_fakeagent_input.py``. ``python -m bench.bench_keys [--quick]``.
"""

from __future__ import annotations

import time

from bench._common import Row, Stats, check, cli, print_table, ratio
from politerm.testing.fakeagent.keys import KeyDecoder

SIZES_KIB = (64, 256, 1024)
QUICK_N = 3
FULL_N = 10
READ = 4095


def _paste(kib: int) -> bytes:
    body = bytes(range(256)).replace(b"\x1b", b"") * (kib * 1024 // 255 + 1)
    return b"\x1b[200~" + body[: kib * 1024] + b"\x1b[201~"


def _decode_ms(data: bytes) -> float:
    decoder = KeyDecoder()
    events = []
    t0 = time.perf_counter_ns()
    for i in range(0, len(data), READ):
        events += decoder.feed(data[i : i + READ])
    took = (time.perf_counter_ns() - t0) / 1e6
    check(len(events) == 1 and events[0].data == data[6:-6], "the paste did not come out whole")
    return took


def main(quick: bool = False) -> list[Row]:
    """Time the decoder per paste size; print and return the table."""
    n = QUICK_N if quick else FULL_N
    rows: list[Row] = []
    base = 0.0
    for kib in SIZES_KIB:
        data = _paste(kib)
        s = Stats.of([_decode_ms(data) for _ in range(n)])
        per_mib = s.p50 * 1024 / kib
        base = base or per_mib
        rows.append(
            {
                "paste KiB": kib,
                "n": n,
                "p50 ms": s.p50,
                "ms per MiB": per_mib,
                "x per MiB": ratio(base, per_mib),
            }
        )
    return print_table("fake agent key decoder: one bracketed paste in 4 KiB reads", rows)


if __name__ == "__main__":
    cli(main)
