"""A retention sweep over a million lines on sqlite and postgres (issue 35), and recall during it.

The store is loaded with ``--lines`` lines (default 1,000,000) in daily documents of
``--lines-per-doc`` lines (default 10), spread over ``--agents`` agents (each agent a
partition), written through ``Vault.retain_many`` in batches (sqlite: one transaction per
batch; postgres: the vault's loop of retains, from ``--writers`` threads). Every other
document carries ``expires_at`` one hour after the load's (manual) clock, so half the
lines expire. The clock then moves two hours on and the bench measures:

* the sweep (``Vault.sweep_expired``: the provider's batches, then its rewrite of the
  storage files so no swept text stays), total seconds and documents (and lines) per second;
* one recall (a few words over one agent's live and expired documents) repeated in a loop
  while the sweep runs, against the same recall repeated in the same process on the same
  store just before the sweep (half its documents expired, not swept: the store the sweep
  starts from): p50 of each, and their ratio (target <= 2x). Also shown: the recall before
  anything expired, and after the sweep (a store of half the lines).

The load is timed too (lines per second), so a run at a smaller ``--lines`` extrapolates
honestly. Words only (no embedder), scanner off: the sweep is what is measured.

    python bench/retention_bench.py [--provider sqlite|postgres|both] [--lines 1000000]
        [--lines-per-doc 10] [--agents 100] [--writers 4] [--out FILE]

postgres runs on a throwaway cluster (``memvault_postgres.testing.TemporaryCluster``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import memvault
from memvault.contract.clock import ManualClock, use_clock

WORKSPACE = "bench"
DAY0 = dt.date(2000, 1, 1)
#: Recalls in each no-sweep round (before and after the sweep).
BASELINE_RECALLS = 200
BATCH = 200  # documents per retain_many


def _words(seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(5000)]


VOCABULARY = _words(35)


def _document(agent: int, day: int, lines: int, rng: random.Random) -> str:
    return "".join(
        f"day {day} note {i} for agent {agent}: {' '.join(rng.choices(VOCABULARY, k=8))}\n" for i in range(lines)
    )


@contextlib.contextmanager
def _store(provider: str, folder: Path) -> Iterator[dict[str, object]]:
    if provider == "sqlite":
        # A loaded machine can hold a batch's write lock for seconds: the other writers wait longer.
        yield {"path": str(folder / "bench.db"), "timeout": 120.0}
        return
    from memvault_postgres.testing import TemporaryCluster

    with TemporaryCluster() as cluster:
        yield {"dsn": cluster.dsn(), "schema": "bench", "pool_size": 8}


def _load(vault: memvault.Vault, args: argparse.Namespace, clock: ManualClock) -> tuple[int, int, float]:
    """Write the documents; return (documents, lines, seconds)."""
    per_agent = max(1, args.lines // args.lines_per_doc // args.agents)
    expires = clock() + dt.timedelta(hours=1)
    jobs: list[list[memvault.RetainRequest]] = []
    rng = random.Random(7)
    for day in range(per_agent):
        batch = []
        for agent in range(args.agents):
            expiring = (day + agent) % 2 == 0
            batch.append(
                memvault.RetainRequest(
                    workspace_id=WORKSPACE,
                    agent_id=f"agent{agent}",
                    tier="daily",
                    key=(DAY0 + dt.timedelta(days=day)).isoformat(),
                    mode="append",
                    content=_document(agent, day, args.lines_per_doc, rng),
                    expires_at=expires if expiring else None,
                )
            )
        for start in range(0, len(batch), BATCH):
            jobs.append(batch[start : start + BATCH])
    documents = sum(len(j) for j in jobs)
    started = time.perf_counter()
    done = 0
    last = started

    def write(job: list[memvault.RetainRequest]) -> None:
        results = vault.retain_many(job)
        bad = [r for r in results if not isinstance(r, memvault.RetainResult)]
        if bad:
            raise RuntimeError(f"load failed: {bad[0]}")

    with ThreadPoolExecutor(max_workers=args.writers) as pool:
        for _ in pool.map(write, jobs):
            done += 1
            now = time.perf_counter()
            if now - last > 15:
                last = now
                share = done / len(jobs)
                print(f"  loaded {share:.0%} in {now - started:.0f} s", file=sys.stderr, flush=True)
    return documents, documents * args.lines_per_doc, time.perf_counter() - started


def _recall_once(vault: memvault.Vault, query: str) -> float:
    started = time.perf_counter()
    vault.recall(memvault.RecallRequest(workspace_id=WORKSPACE, agent_id="agent1", query=query, limit=10))
    return (time.perf_counter() - started) * 1000


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run(provider: str, args: argparse.Namespace) -> dict[str, object]:
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp, _store(provider, Path(tmp)) as settings, use_clock(clock):
        vault = memvault.open(provider, scanner="off", embedder="off", background_sweep=False, **settings)
        try:
            documents, lines, load_seconds = _load(vault, args, clock)
            print(f"{provider}: loaded {lines:,} lines in {load_seconds:.0f} s", file=sys.stderr, flush=True)
            query = " ".join(VOCABULARY[i] for i in (11, 222, 3333))
            loaded = [_recall_once(vault, query) for _ in range(BASELINE_RECALLS)]
            # Half the documents expire: the store a sweep starts from (they are absent already).
            clock.advance(dt.timedelta(hours=2))
            for _ in range(20):  # warm-up
                _recall_once(vault, query)
            before = [_recall_once(vault, query) for _ in range(BASELINE_RECALLS)]
            during: list[float] = []
            done = threading.Event()

            def recaller() -> None:
                while not done.is_set():
                    during.append(_recall_once(vault, query))
                    time.sleep(0.002)

            thread = threading.Thread(target=recaller, daemon=True)
            thread.start()
            started = time.perf_counter()
            report = vault.sweep_expired()
            sweep_seconds = time.perf_counter() - started
            done.set()
            thread.join()
            after = [_recall_once(vault, query) for _ in range(BASELINE_RECALLS)]
            swept = len(report.documents)
            remaining = vault.list_documents(memvault.ListDocumentsRequest(workspace_id=WORKSPACE)).documents
        finally:
            vault.close()
    baseline = before
    return {
        "provider": provider,
        "documents": documents,
        "lines": lines,
        "load_s": load_seconds,
        "load_lines_per_s": lines / load_seconds,
        "swept_documents": swept,
        "swept_lines": swept * args.lines_per_doc,
        "left_documents": len(remaining),
        "sweep_s": sweep_seconds,
        "sweep_docs_per_s": swept / sweep_seconds,
        "sweep_lines_per_s": swept * args.lines_per_doc / sweep_seconds,
        "recall_p50_no_sweep_ms": _p50(baseline),
        "recall_p50_loaded_ms": _p50(loaded),
        "recall_p50_after_ms": _p50(after),
        "recall_p50_during_ms": _p50(during),
        "recalls_during": len(during),
        "ratio": _p50(during) / _p50(baseline),
    }


def _table(rows: list[dict[str, object]], args: argparse.Namespace) -> str:
    out = [
        f"# Retention sweep ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()})",
        "",
        f"`python bench/retention_bench.py --lines {args.lines} --lines-per-doc {args.lines_per_doc} "
        f"--agents {args.agents} --writers {args.writers}`",
        "",
        "| provider | lines loaded | load s (lines/s) | swept docs (lines) | sweep s | docs/s | lines/s "
        "| recall p50 no sweep ms | during ms (n) | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['provider']} | {r['lines']:,} | {r['load_s']:.0f} ({r['load_lines_per_s']:,.0f}) "
            f"| {r['swept_documents']:,} ({r['swept_lines']:,}) | {r['sweep_s']:.1f} | {r['sweep_docs_per_s']:,.0f} "
            f"| {r['sweep_lines_per_s']:,.0f} | {r['recall_p50_no_sweep_ms']:.2f} "
            f"(nothing expired {r['recall_p50_loaded_ms']:.2f}; swept {r['recall_p50_after_ms']:.2f}) "
            f"| {r['recall_p50_during_ms']:.2f} ({r['recalls_during']}) | {r['ratio']:.2f}x |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--lines-per-doc", type=int, default=10)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--writers", type=int, default=4, help="threads loading (postgres gains from several)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    providers = ["sqlite", "postgres"] if args.provider == "both" else [args.provider]
    rows = []
    for provider in providers:
        rows.append(run(provider, args))
        print(_table(rows[-1:], args), file=sys.stderr, flush=True)
    table = _table(rows, args)
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
