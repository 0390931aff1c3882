"""The cost of the sqlite provider's file-identity check (one ``os.stat`` per call, two per write).

Every verb compares the file its path names with the one the vault opened (#33: a backup
moved over a running vault's file). This times ``retain`` (append, synchronous=full and
normal) and ``recall`` with the check and with it turned off, interleaved in one run so that
both halves see the same disk and the same load, and prints each verb's p50 and p90.

    python bench/sqlite_swap_check_bench.py [--rounds 5] [--calls 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import memvault
from memvault_sqlite.connection import Database


def timed(call: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    checked = Database.check_file
    samples: dict[tuple[str, str], list[float]] = {}
    stat_ns = []
    check_ns: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        for _ in range(10_000):
            start = time.perf_counter_ns()
            os.stat(path.parent)
            stat_ns.append(time.perf_counter_ns() - start)
        for synchronous in ("full", "normal"):
            with memvault.open(
                "sqlite", path=str(path), scanner="off", embedder="off", synchronous=synchronous, idle_merge=0
            ) as v:
                for i in range(200):
                    v.retain(
                        memvault.RetainRequest(
                            workspace_id="w",
                            agent_id="a",
                            tier="peers",
                            key=f"p{i}",
                            content=f"line {i} about metric units and weather\n",
                            mode="append",
                        )
                    )
                retain = lambda: v.retain(  # noqa: E731
                    memvault.RetainRequest(
                        workspace_id="w",
                        agent_id="a",
                        tier="pins",
                        content="one more line about units\n",
                        mode="replace",
                    )
                )
                recall = lambda: v.recall(  # noqa: E731
                    memvault.RecallRequest(workspace_id="w", agent_id="a", query="metric weather")
                )
                db = v.provider.db  # type: ignore[attr-defined]
                for _ in range(20_000):
                    start = time.perf_counter_ns()
                    db.check_file()
                    check_ns.append(time.perf_counter_ns() - start)
                for _round in range(args.rounds):
                    for mode in ("off", "on") if _round % 2 == 0 else ("on", "off"):
                        Database.check_file = checked if mode == "on" else (lambda self, verb="": None)  # type: ignore[method-assign]
                        try:
                            samples.setdefault((f"retain sync={synchronous}", mode), []).extend(
                                timed(retain, args.calls // 4)
                            )
                            if synchronous == "full":
                                samples.setdefault(("recall", mode), []).extend(timed(recall, args.calls))
                        finally:
                            Database.check_file = checked  # type: ignore[method-assign]
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
    print(f"os.stat of a folder: p50 {statistics.median(stat_ns) / 1000:.2f} us")
    print(f"Database.check_file (the check a call makes): p50 {statistics.median(check_ns) / 1000:.2f} us")
    print("| verb | check off p50 / p90 (us) | check on p50 / p90 (us) | p50 difference |")
    print("|---|---|---|---|")
    for verb in dict.fromkeys(v for v, _ in samples):
        cells = []
        p50s = []
        for mode in ("off", "on"):
            xs = sorted(samples[(verb, mode)])
            p50 = statistics.median(xs) * 1e6
            p50s.append(p50)
            cells.append(f"{p50:.1f} / {xs[int(len(xs) * 0.9)] * 1e6:.1f}")
        change = f"{p50s[1] - p50s[0]:+.1f} us ({(p50s[1] / p50s[0] - 1) * 100:+.1f} %)"
        print(f"| {verb} | {cells[0]} | {cells[1]} | {change} |")


if __name__ == "__main__":
    main()
