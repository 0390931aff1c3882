"""Recall by meaning off the write path (#32 item 5): what a retain pays, and how fast the backlog drains.

On sqlite (``synchronous=normal``, scanner on, as configured by default), in the same run:

* retain p50 of one-line appends with the embedder off and with it on (its background worker
  embedding meanwhile), alternated in rounds so machine noise falls on both alike;
* the backlog those writes leave, drained by the background worker: lines per second from the last
  write until ``embedding_backlog() == 0``, beside the model's own batch rate (``embed`` on batches of
  32 LoCoMo turns, no storage) measured in the same run.

Run: ``python bench/meaning_write_bench.py [--rounds 5] [--per-round 200]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import memvault

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sqlite_locomo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=200)
    args = parser.parse_args()
    embedder = memvault.registry.get_registry().embedder("auto")
    if embedder is None:
        sys.exit("no embedder installed: pip install ./plugins/embed-minilm")
    turns = [
        sqlite_locomo.turn_line(t)
        for sample in sqlite_locomo.load()
        for v in sample["conversation"].values()
        if isinstance(v, list)
        for t in v
    ]
    # The model alone, in batches of 32.
    start = time.perf_counter()
    sample = turns[:640]
    for i in range(0, len(sample), 32):
        embedder.embed(sample[i : i + 32])
    model_rate = len(sample) / (time.perf_counter() - start)
    off_times: list[float] = []
    on_times: list[float] = []
    drains: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        off = memvault.open("sqlite", path=f"{tmp}/off.db", synchronous="normal", embedder="off")
        on = memvault.open("sqlite", path=f"{tmp}/on.db", synchronous="normal", embedder=embedder)
        cursor = 0
        for _ in range(args.rounds):
            for vault, times in ((off, off_times), (on, on_times)):
                for i in range(args.per_round):
                    line = turns[(cursor + i) % len(turns)]
                    request = memvault.RetainRequest(
                        workspace_id="bench", agent_id="a", tier="daily", key=f"2024-01-{1 + i % 28:02d}",
                        content=line + "\n", mode="append",
                    )  # fmt: skip
                    t0 = time.perf_counter()
                    vault.retain(request)
                    times.append(time.perf_counter() - t0)
            cursor += args.per_round
            # The backlog this round left, drained by the worker.
            t0 = time.perf_counter()
            waiting = on.embedding_backlog()
            while on.embedding_backlog():
                time.sleep(0.01)
            if waiting:
                drains.append(waiting / (time.perf_counter() - t0))
        off.close()
        on.close()
    off_p50, on_p50 = statistics.median(off_times), statistics.median(on_times)
    print(
        f"retain p50 ({len(off_times)} each): embedder off {off_p50 * 1e3:.3f} ms, on {on_p50 * 1e3:.3f} ms "
        f"(+{(on_p50 - off_p50) * 1e3:.3f} ms)"
    )
    print(
        f"backlog drained by the background worker: median {statistics.median(drains):.0f} lines/s "
        f"over {len(drains)} rounds; the model alone: {model_rate:.0f} lines/s (batches of 32)"
    )


if __name__ == "__main__":
    main()
