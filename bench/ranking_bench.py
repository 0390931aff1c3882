"""One ranking for every provider: recall quality and recall cost per provider, against an older tree.

For each provider (memory, local-disk, sqlite by default) and each contender (this
tree and, with ``--baseline REF``, the tree at git ``REF``), in interleaved rounds,
each in a fresh process (the order of the contenders alternates by round):

postgres is measured too when named (a private cluster, ``memvault_postgres.testing``).

1. LoCoMo recall@1/5/10/20 through ``vault.recall`` on the tuning conversations
   (0-4), the held-out ones (5-9) and all ten (``sqlite_locomo``: one partition per
   conversation, one daily document per session), and the p50 of those recalls;
2. the recall shapes of ``sqlite_bench.common_terms`` (one 10,000-line partition of
   12-word lines over a small Zipf vocabulary, 250-line daily documents): p50 per
   shape, and how many hits the shape returns at ``limit=20``;
3. a long history (``sqlite_bench.write_history``: one partition of 3,000 daily
   documents of three lines): p50 of LoCoMo questions and of a rare word.

The baseline tree is extracted with ``git archive`` and put first on ``PYTHONPATH``
(its core and the sqlite and local-disk plugins), so both contenders share the venv
and the machine's conditions. Medians over rounds are printed as a markdown table.

Run: ``python bench/ranking_bench.py --baseline 090582f [--rounds 3] [--providers memory,local-disk]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _settings(provider: str, folder: str, dsn: str) -> dict[str, Any]:
    if provider == "sqlite":
        return {"path": f"{folder}/store.db", "synchronous": "off"}
    if provider == "local-disk":
        return {"root": f"{folder}/files"}
    if provider == "postgres":
        return {"dsn": dsn}
    return {}


def _settle(provider: str, dsn: str) -> None:
    """Time the steady state, not the first seconds after a bulk write: local-disk does not cache a file
    changed in the last 2 seconds (its "racy" window), so wait it out; PostgreSQL plans with no statistics
    until autovacuum's first ANALYZE of the new tables (up to a minute), so run it."""
    if provider == "local-disk":
        time.sleep(2.1)
    if provider == "postgres":
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")


@contextlib.contextmanager
def _database(providers: list[str]) -> Iterator[str]:
    """A private PostgreSQL cluster when postgres is measured (its database is emptied per use)."""
    if "postgres" not in providers:
        yield ""
        return
    from memvault_postgres.testing import TemporaryCluster

    with TemporaryCluster() as cluster:
        yield cluster.dsn()


def _empty(provider: str, dsn: str) -> None:
    if provider == "postgres":
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS memvault CASCADE")  # the provider's default schema


def worker(providers: list[str]) -> dict[str, Any]:
    """One contender's figures, in this process (whatever ``memvault`` is importable)."""
    import memvault

    sys.path.insert(0, str(HERE))
    import sqlite_locomo as locomo

    data = locomo.load()
    out: dict[str, Any] = {}
    with _database(providers) as dsn:
        for provider in providers:
            out[provider] = _figures(memvault, locomo, data, provider, dsn)
    return out


def _figures(memvault: Any, locomo: Any, data: list[dict[str, Any]], provider: str, dsn: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    _empty(provider, dsn)
    with (
        tempfile.TemporaryDirectory() as tmp,
        memvault.open(provider, scanner="off", **_settings(provider, tmp, dsn)) as vault,
    ):
        where, _ = locomo.build(vault, data)
        _settle(provider, dsn)
        locomo.evaluate(vault, data[:2], where)  # warm
        for name, subset in locomo.SPLITS.items():
            recall, _, latencies = locomo.evaluate(vault, [data[i] for i in subset], where)
            figures[f"recall {name}"] = recall
            if name == "all":
                figures["locomo p50"] = statistics.median(latencies)
    import sqlite_bench  # on sys.path (worker)

    lines = sqlite_bench.common_term_lines(10_000)
    shapes = {**sqlite_bench.COMMON_TERM_SHAPES, "a rare word + two common, no line with all": "topic200 apple river"}
    _empty(provider, dsn)
    with (
        tempfile.TemporaryDirectory() as tmp,
        memvault.open(provider, scanner="off", **_settings(provider, tmp, dsn)) as vault,
    ):
        for d in range(0, len(lines), 250):
            day = 1 + d // 250
            key = f"2024-{1 + (day - 1) // 28:02d}-{1 + (day - 1) % 28:02d}"
            body = "".join(line + "\n" for line in lines[d : d + 250])
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="w", agent_id="a", tier="daily", key=key, content=body, mode="append"
                )
            )
        _settle(provider, dsn)
        for shape, query in shapes.items():
            request = memvault.RecallRequest(workspace_id="w", agent_id="a", query=query, limit=20)
            hits = len(vault.recall(request).hits)
            times = []
            for _ in range(15):
                start = time.perf_counter()
                vault.recall(request)
                times.append(time.perf_counter() - start)
            figures[f"shape {shape}"] = (statistics.median(times), hits)
    _empty(provider, dsn)
    with (
        tempfile.TemporaryDirectory() as tmp,
        memvault.open(provider, scanner="off", **_settings(provider, tmp, dsn)) as vault,
    ):
        history = sqlite_bench.write_history(vault)
        _settle(provider, dsn)
        for shape, queries in history.items():
            times = []
            for i in range(80):
                request = memvault.RecallRequest(workspace_id="w", agent_id="a", query=queries[i % len(queries)])
                start = time.perf_counter()
                vault.recall(request)
                times.append(time.perf_counter() - start)
            figures[f"history {shape}"] = statistics.median(times)
    return figures


def _extract(ref: str, into: Path) -> str:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    folders = ("core/src", "plugins/sqlite/src", "plugins/local-disk/src", "plugins/postgres/src")
    return os.pathsep.join(str(into / p) for p in folders)


def _run(providers: list[str], pythonpath: str | None) -> dict[str, Any]:
    env = dict(os.environ, MEMVAULT_LOAD_PLUGINS="sqlite,local-disk,postgres")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        [sys.executable, __file__, "--worker", "--providers", ",".join(providers)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", default="memory,local-disk,sqlite,postgres")
    parser.add_argument("--baseline", help="a git ref to measure in the same rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the Markdown report here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    providers = args.providers.split(",")
    if args.worker:
        print(json.dumps(worker(providers)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        contenders: dict[str, str | None] = {"this tree": None}
        if args.baseline:
            contenders[args.baseline] = _extract(args.baseline, Path(tmp))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
        for round_ in range(args.rounds):
            order = list(contenders.items())
            if round_ % 2:  # whoever runs first in a round may be slowed by it: alternate
                order.reverse()
            for name, path in order:
                runs[name].append(_run(providers, path))
                print(f"round {round_ + 1}: {name} done", file=sys.stderr)
    names = list(contenders)
    table = [f"| provider | measure | {' | '.join(names)} |", f"|---|---|{'---|' * len(names)}"]
    for provider in providers:
        for key in runs[names[0]][0][provider]:
            cells = []
            for name in names:
                values = [run[provider][key] for run in runs[name]]
                if key.startswith("recall"):
                    cells.append(" / ".join(f"{values[0][k]:.3f}" for k in ("1", "5", "10", "20")))
                    continue
                times = [v[0] if key.startswith("shape") else v for v in values]
                cell = f"{statistics.median(times) * 1e3:.2f} ms"
                if key.startswith("shape"):
                    cell += f" ({values[0][1]} hits)"
                if len(times) > 1:
                    cell += f" [{', '.join(f'{t * 1e3:.2f}' for t in times)}]"
                cells.append(cell)
            label = f"{key}: @1 / @5 / @10 / @20" if key.startswith("recall") else key
            table.append(f"| {provider} | {label} | {' | '.join(cells)} |")
    print("\n".join(table))
    if args.out:
        command = " ".join(["python bench/ranking_bench.py", *sys.argv[1:]])
        header = (
            f"`{command}`: medians over {args.rounds} interleaved rounds, the order alternating (each round's "
            "figure in brackets); "
            "recall@k is the same in every round.\n\n"
        )
        args.out.write_text(header + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()
