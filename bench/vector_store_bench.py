"""Vectors in the sqlite and postgres providers (#32): what they cost to find, store and search.

For each provider and partition size: the embedding backlog's hooks (``memvault_vectors_pending``
with 64 lines waiting and with none, ``memvault_vectors_backlog``), recall p50 by words alone and
fused with vectors (the query's vector given, its embedding not timed: that is the embedder's
cost, measured in bench/meaning_bench.py), and the disk the vectors take (384 dimensions, the
default model's, as float16). Vectors are random unit vectors stored through the provider's own
hooks, so no model is loaded.

    python bench/vector_store_bench.py [--lines 600,20000,100000] [--providers sqlite,postgres] [--json]

postgres runs on a throwaway local cluster (memvault_postgres.testing.TemporaryCluster).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import memvault
from memvault.contract.embedding import QueryVector, vector_bytes

DIMENSIONS = 384
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()  # noqa: SIM905
LINES_PER_DOCUMENT = 100
MODEL = "bench-random-384"


def _fill(vault: memvault.Vault, lines: int) -> None:
    rng = random.Random(7)
    start = _dt.date(2020, 1, 1)
    requests = []
    for doc in range(lines // LINES_PER_DOCUMENT):
        body = "".join(" ".join(rng.choices(WORDS, k=12)) + f" item{doc}-{i}\n" for i in range(LINES_PER_DOCUMENT))
        key = (start + _dt.timedelta(days=doc)).isoformat()
        requests.append(
            memvault.RetainRequest(
                workspace_id="bench", agent_id="agent", tier="daily", key=key, content=body, mode="replace"
            )
        )
    for at in range(0, len(requests), 64):
        vault.retain_many(requests[at : at + 64])


def _unit(rng: np.random.Generator, n: int) -> Any:
    values = rng.standard_normal((n, DIMENSIONS)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def _timed(action: Callable[[], object], runs: int) -> float:
    """p50 in milliseconds."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def measure(
    vault: memvault.Vault, lines: int, size: Callable[[], int], *, timed_recall: bool = True
) -> dict[str, float]:
    hook = vault.plugin_manager.hook
    began = time.perf_counter()
    _fill(vault, lines)
    filled = time.perf_counter() - began
    out: dict[str, float] = {"lines": lines, "fill_s": round(filled, 1)}
    out["backlog_full_ms"] = _timed(lambda: hook.memvault_vectors_backlog(model_id=MODEL), 5)
    out["pending_full_ms"] = _timed(lambda: hook.memvault_vectors_pending(model_id=MODEL, limit=64), 5)
    rng = np.random.default_rng(1)
    began = time.perf_counter()
    stored = 0
    while True:
        pending = hook.memvault_vectors_pending(model_id=MODEL, limit=64)
        if not pending:
            break
        vectors = _unit(rng, len(pending))
        stored += hook.memvault_vectors_store(
            model_id=MODEL, vectors=[(p.key, vector_bytes(v)) for p, v in zip(pending, vectors, strict=True)]
        )
    out["store_lines_per_s"] = round(stored / (time.perf_counter() - began))
    assert stored == lines, (stored, lines)
    out["backlog_empty_ms"] = _timed(lambda: hook.memvault_vectors_backlog(model_id=MODEL), 20)
    out["pending_empty_ms"] = _timed(lambda: hook.memvault_vectors_pending(model_id=MODEL, limit=64), 20)
    queries = [" ".join(random.Random(q).choices(WORDS, k=2)) + f" item{q % max(1, lines // 100)}-3" for q in range(20)]
    vectors = _unit(np.random.default_rng(2), len(queries))

    def recall(with_vector: bool) -> Callable[[], object]:
        requests = [
            memvault.RecallRequest(
                workspace_id="bench",
                agent_id="agent",
                query=q,
                vector=QueryVector(model_id=MODEL, values=v) if with_vector else None,
            )
            for q, v in zip(queries, vectors, strict=True)
        ]
        turn = iter(range(10**9))
        return lambda: vault.plugin_manager.hook.memvault_recall(request=requests[next(turn) % len(requests)])

    if timed_recall:
        recall(True)()  # warm
        out["recall_words_p50_ms"] = _timed(recall(False), 40)
        out["recall_fused_p50_ms"] = _timed(recall(True), 40)
    out["vector_bytes"] = size()
    out["bytes_per_line"] = round(out["vector_bytes"] / lines)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


@contextmanager
def sqlite_vault(folder: Path) -> Iterator[tuple[memvault.Vault, Callable[[], int]]]:
    from memvault_sqlite import SqliteProvider

    path = folder / "bench.db"
    provider = SqliteProvider(str(path), synchronous="normal")
    vault = memvault.Vault(provider, name="sqlite", capabilities=provider.capabilities)

    def size() -> int:
        # The vectors table and its model index, plus the partial index of lines waiting (dbstat).
        conn = provider.db.conn()
        row = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name IN ('line_vectors', 'line_vectors_by_model',"
            " 'lines_without_vector')"
        ).fetchone()
        return int(row[0] or 0)

    try:
        yield vault, size
    finally:
        vault.close()


@contextmanager
def postgres_vault(folder: Path) -> Iterator[tuple[memvault.Vault, Callable[[], int]]]:
    from memvault_postgres import PostgresProvider
    from memvault_postgres.testing import TemporaryCluster

    with TemporaryCluster() as cluster:
        provider = PostgresProvider(cluster.dsn(), schema="bench")
        vault = memvault.Vault(provider, name="postgres", capabilities=provider.capabilities)

        def size() -> int:
            with cluster.admin("memvault") as conn:
                conn.execute("VACUUM ANALYZE bench.line_vectors")
                row = conn.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits AS i"
                    " JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = 'bench.line_vectors'::regclass"
                ).fetchone()
            return int(row[0] or 0) if row else 0

        try:
            yield vault, size
        finally:
            vault.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="600,20000,100000")
    parser.add_argument("--providers", default="sqlite,postgres")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--recall-up-to", type=int, default=10**9, help="time recall only up to this many lines")
    args = parser.parse_args()
    results = []
    for name in args.providers.split(","):
        for lines in [int(n) for n in args.lines.split(",")]:
            with tempfile.TemporaryDirectory() as folder:
                opener = sqlite_vault if name == "sqlite" else postgres_vault
                with opener(Path(folder)) as (vault, size):
                    row = {"provider": name, **measure(vault, lines, size, timed_recall=lines <= args.recall_up_to)}
            results.append(row)
            if not args.json:
                print(row, flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
