"""The postgres provider next to sqlite, on the same data in the same run (figures: docs/performance.md).

1. Single-retain rate: committed appends per second through ``vault.retain``,
   one at a time, for sqlite (``synchronous=full``) and postgres (a throwaway
   local server with ``fsync=on``, ``synchronous_commit=on``).
2. Recall latency p50/p95 at growing store sizes (default 10k, 100k and 1M
   lines; 1,000 lines per partition as 10 daily documents of LoCoMo turns,
   every line retained through ``vault.retain``), LoCoMo questions as queries.
3. Write throughput through ``memvault serve --provider postgres``: one replica
   against two on the same database, 8 client threads appending.
4. LoCoMo recall@1/5/10/20 through ``vault.recall`` for both providers.
5. ``--only-long-history``: one agent with 3,000 daily documents (three LoCoMo
   turns each) against one with 30, both providers: recall p50 of LoCoMo
   questions and of a rare word in each, so the ratio says how much a long
   history costs every recall; for postgres also after flushing the GIN
   pending lists (``gin_clean_pending_list``), the same recalls with no
   unsorted index entries left to scan.
6. ``--only-neighbours``: one agent's 100-line partition recalled (100 LoCoMo
   questions, 3 rounds) while 400 other agents of the store append single
   lines: after 0, 16,000 and 48,000 of their lines, with the retain
   percentiles of those appends. ``--analyze-early`` analyses the store after
   its first 100 lines, as autovacuum does to a young store.

The PostgreSQL server is started by the bench (``memvault_postgres.testing``),
so nothing but the server binaries is needed.

Run: ``python bench/postgres_bench.py [--dataset PATH] [--sizes 10000,100000,1000000] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import memvault
from memvault_postgres.testing import TemporaryCluster

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sqlite_locomo as locomo  # noqa: E402

DEFAULT_DATASET = HERE / "data" / "locomo" / "locomo10.json"
LINES_PER_PARTITION = 1000
DOCS_PER_PARTITION = 10
QUERIES = 200
random.seed(11)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def corpus() -> tuple[list[str], list[str]]:
    data = locomo.load()
    lines: list[str] = []
    questions: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        for key in sorted(conv, key=lambda k: (len(k), k)):
            if key.startswith("session_") and isinstance(conv[key], list):
                lines.extend(locomo.turn_line(t) for t in conv[key])
        questions.extend(str(q["question"]) for q in sample["qa"] if q.get("category") in (1, 2, 3, 4))
    return lines, questions


def partition_docs(lines: list[str], p: int) -> list[str]:
    start = (p * 997) % len(lines)
    mine = [lines[(start + i) % len(lines)] for i in range(LINES_PER_PARTITION)]
    per = LINES_PER_PARTITION // DOCS_PER_PARTITION
    return ["".join(ln + "\n" for ln in mine[d * per : (d + 1) * per]) for d in range(DOCS_PER_PARTITION)]


@contextmanager
def stores(tmp: Path, cluster: TemporaryCluster, schema: str) -> Iterator[dict[str, memvault.Vault]]:
    with (
        memvault.open("sqlite", path=str(tmp / f"{schema}.db"), scanner="off") as sqlite_vault,
        memvault.open("postgres", dsn=cluster.dsn(), schema=schema, scanner="off") as pg_vault,
    ):
        yield {"sqlite": sqlite_vault, "postgres": pg_vault}


# -- 1. single-retain rate ------------------------------------------------------


def retain_rate(vaults: dict[str, memvault.Vault], lines: list[str], n: int = 400) -> dict[str, float]:
    out = {}
    for name, vault in vaults.items():
        start = time.perf_counter()
        for i in range(n):
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="rate",
                    agent_id=f"agent-{i % 20}",
                    tier="daily",
                    key="2024-02-01",
                    content=lines[i % len(lines)][:120] + "\n",
                    mode="append",
                )
            )
        out[name] = n / (time.perf_counter() - start)
    return out


# -- 2. recall at scale ---------------------------------------------------------


def grow(vault: memvault.Vault, lines: list[str], start: int, stop: int) -> float:
    began = time.perf_counter()
    for p in range(start, stop):
        for d, body in enumerate(partition_docs(lines, p)):
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="bench",
                    agent_id=f"agent-{p}",
                    tier="daily",
                    key=f"2024-01-{d + 1:02d}",
                    content=body,
                    mode="replace",
                )
            )
    return time.perf_counter() - began


def recall_times(vault: memvault.Vault, queries: list[tuple[int, str]]) -> list[float]:
    times = []
    for p, q in queries:
        start = time.perf_counter()
        vault.recall(memvault.RecallRequest(workspace_id="bench", agent_id=f"agent-{p}", query=q))
        times.append(time.perf_counter() - start)
    return times


def scale(
    vaults: dict[str, memvault.Vault], lines: list[str], questions: list[str], sizes: list[int], budget: float
) -> list[dict[str, Any]]:
    results = []
    have = 0
    began = time.perf_counter()
    for size in sizes:
        partitions = size // LINES_PER_PARTITION
        if time.perf_counter() - began > budget:
            print(f"  skipping {size} lines: build budget of {budget:.0f} s spent", flush=True)
            break
        built = {name: grow(v, lines, have, partitions) for name, v in vaults.items()}
        have = partitions
        targets = random.sample(range(partitions), min(25, partitions))
        queries = [(p, random.choice(questions)) for p in targets for _ in range(QUERIES // len(targets))]
        row: dict[str, Any] = {"lines": size}
        for name, vault in vaults.items():
            recall_times(vault, queries[:10])  # warm caches
            times = recall_times(vault, queries)
            row[name] = {"p50": statistics.median(times), "p95": pct(times, 0.95), "build_s": built[name]}
        results.append(row)
        print(f"  {size} lines: {row}", flush=True)
    return results


# -- 3. replicas ----------------------------------------------------------------


def serve(cluster: TemporaryCluster, schema: str, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    command = [sys.executable, "-c", "from memvault.cli.main import main; main()", "serve", "--provider", "postgres"]
    proc = subprocess.Popen(
        [*command, "-o", f"dsn={cluster.dsn()}", "-o", f"schema={schema}", "--port", "0"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on " in line:
            return proc, line.split("listening on ", 1)[1].split(" ", 1)[0]
    raise RuntimeError("memvault serve did not start")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes (and their reaped children) used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / tick
    return total


def server_pids(cluster: TemporaryCluster) -> list[int]:
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


#: CPU seconds per second of the last replica run: clients, replicas, PostgreSQL.
CPU_SHARES: dict[int, dict[str, float]] = {}


def replica_throughput(cluster: TemporaryCluster, tmp: Path, replicas: int, seconds: float = 10.0) -> float:
    schema = f"replicas_{replicas}"
    memvault.open("postgres", dsn=cluster.dsn(), schema=schema).close()
    procs = [serve(cluster, schema, tmp) for _ in range(replicas)]
    acked = [0] * 8
    stop = threading.Event()

    def writer(w: int) -> None:
        url = procs[w % replicas][1]
        with memvault.open("http-remote", url=url, scanner="off") as vault:
            while not stop.is_set():
                vault.retain(
                    memvault.RetainRequest(
                        workspace_id="load",
                        agent_id=f"agent-{w}",
                        tier="daily",
                        key=f"2024-03-{acked[w] // 200 + 1:02d}",
                        content=f"writer {w} line {acked[w]} about the weekend plans\n",
                        mode="append",
                    )
                )
                acked[w] += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)  # connections made, pools warm
        base = sum(acked)
        watched = {
            "clients": [os.getpid()],
            "replicas": [p.pid for p, _url in procs],
            "postgres": server_pids(cluster),
        }
        before = {k: cpu_seconds(v) for k, v in watched.items()}
        time.sleep(seconds)
        CPU_SHARES[replicas] = {k: (cpu_seconds(v) - before[k]) / seconds for k, v in watched.items()}
        done = sum(acked) - base
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        stop.set()
        for proc, _url in procs:
            proc.terminate()
            proc.wait(15)
    return done / seconds


# -- main -----------------------------------------------------------------------


# -- 5. a long history in one partition ----------------------------------------------

LONG_DOCS = 3000


def history(vault: memvault.Vault, agent: str, lines: list[str], docs: int) -> list[float]:
    """The same :data:`LONG_DOCS` days of three LoCoMo turns for ``agent`` in ``docs`` daily documents.

    :return: the retain times.
    """
    times = []
    per = LONG_DOCS // docs
    for d in range(docs):
        day = f"{2015 + d // 336}-{1 + (d // 28) % 12:02d}-{1 + d % 28:02d}"
        body = "".join(lines[(d * per * 3 + i) % len(lines)][:200] + "\n" for i in range(per * 3))
        start = time.perf_counter()
        vault.retain(
            memvault.RetainRequest(
                workspace_id="bench", agent_id=agent, tier="daily", key=day, content=body, mode="append"
            )
        )
        times.append(time.perf_counter() - start)
    return times


def history_recalls(vault: memvault.Vault, agent: str, queries: list[str], rounds: int = 3) -> float:
    """The median over ``rounds`` of the recall p50 of ``queries`` in ``agent``'s partition."""
    medians = []
    for _ in range(rounds):
        times = []
        for q in queries:
            start = time.perf_counter()
            vault.recall(memvault.RecallRequest(workspace_id="bench", agent_id=agent, query=q))
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return statistics.median(medians)


def long_history(cluster: TemporaryCluster, tmp: Path, lines: list[str], questions: list[str]) -> list[str]:
    short_docs = LONG_DOCS // 30
    # A rare word: in about one line of a hundred of the long history.
    counts: dict[str, int] = {}
    for d in range(LONG_DOCS):
        for i in range(3):
            for word in set(lines[(d * 3 + i) % len(lines)][:200].lower().split()):
                if word.isalpha() and len(word) > 5:
                    counts[word] = counts.get(word, 0) + 1
    rare = sorted((w for w, n in counts.items() if 60 <= n <= 120), key=lambda w: (counts[w], w))[:20]
    asked = random.sample(questions, QUERIES)
    out = [
        f"The same {LONG_DOCS * 3:,} LoCoMo turns in one partition as {LONG_DOCS:,} daily documents of 3 turns"
        f" and as {short_docs} of {LONG_DOCS // short_docs * 3}: recall p50 (median of 3 rounds) of {len(asked)}"
        f" LoCoMo questions and of {len(rare)} rare words (in 60-120 lines each); the ratio is the cost of"
        " keeping the same lines in 30 times as many documents. Retain p50: the 3,000 appends.\n",
        f"| provider | retain p50 | questions: {short_docs} docs | {LONG_DOCS:,} docs | ratio"
        f" | rare word: {short_docs} docs | {LONG_DOCS:,} docs | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with stores(tmp, cluster, "history") as vaults:
        writes = {name: history(vault, "long", lines, LONG_DOCS) for name, vault in vaults.items()}
        for vault in vaults.values():
            history(vault, "short", lines, short_docs)
        with cluster.admin("memvault") as conn:
            conn.execute("ANALYZE history.documents, history.lines")  # as autovacuum would, soon after a fill
        rows = []
        for name, vault in [*vaults.items(), ("postgres, pending lists flushed", vaults["postgres"])]:
            if name.startswith("postgres,"):
                with cluster.admin("memvault") as conn:
                    for (index,) in conn.execute(
                        "SELECT c.oid::regclass::text FROM pg_class AS c JOIN pg_namespace AS n"
                        " ON n.oid = c.relnamespace WHERE n.nspname = 'history' AND c.relkind = 'i'"
                        " AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'gin')"
                    ).fetchall():
                        conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (index,))
            q_short, q_long = (history_recalls(vault, agent, asked) for agent in ("short", "long"))
            r_short, r_long = (history_recalls(vault, agent, rare, rounds=5) for agent in ("short", "long"))
            retain = ms(statistics.median(writes[name])) if name in writes else ""
            rows.append(
                f"| {name} | {retain} | {ms(q_short)} | {ms(q_long)} | {q_long / q_short:.2f}x"
                f" | {ms(r_short)} | {ms(r_long)} | {r_long / r_short:.2f}x |"
            )
            print(rows[-1], flush=True)
    return out + rows


# -- 6. other tenants' writes -------------------------------------------------------


def neighbours(
    cluster: TemporaryCluster, lines: list[str], questions: list[str], *, analyze_early: bool = False
) -> list[str]:
    out = [
        "One agent's 100-line partition, recall p50 of 100 LoCoMo questions (3 rounds), after 400 other"
        " agents of the store appended the lines shown; retain percentiles of those appends."
        + (" The store was analysed after its first 100 lines." if analyze_early else "")
        + "\n",
        "| other agents' lines | recall p50 | their retain p50 | p99 | p99.9 | max |",
        "|---|---|---|---|---|---|",
    ]
    with memvault.open("postgres", dsn=cluster.dsn(), schema="neighbours", scanner="off") as vault:
        for d in range(10):
            body = "".join(line[:200] + "\n" for line in lines[d * 10 : d * 10 + 10])
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="w",
                    agent_id="me",
                    tier="daily",
                    key=f"2020-01-{d + 1:02d}",
                    content=body,
                    mode="append",
                )
            )
        if analyze_early:
            with cluster.admin("memvault") as conn:
                conn.execute("ANALYZE neighbours.documents, neighbours.lines")
        asked = questions[:100]
        written = 0
        for target in (0, 16_000, 48_000):
            writes = []
            while written < target:
                start = time.perf_counter()
                vault.retain(
                    memvault.RetainRequest(
                        workspace_id="w",
                        agent_id=f"other-{written % 400}",
                        tier="daily",
                        key="2020-02-01",
                        content=lines[written % len(lines)][:200] + "\n",
                        mode="append",
                    )
                )
                writes.append(time.perf_counter() - start)
                written += 1
            times = []
            for _ in range(3):
                for q in asked:
                    start = time.perf_counter()
                    vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="me", query=q))
                    times.append(time.perf_counter() - start)
            tail = (
                " | ".join(ms(pct(writes, q)) for q in (0.5, 0.99, 0.999)) + f" | {ms(max(writes))}"
                if writes
                else " |  |  | "
            )
            out.append(f"| {target:,} | {ms(statistics.median(times))} | {tail} |")
            print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="LoCoMo's locomo10.json")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="store sizes in lines, comma-separated")
    parser.add_argument(
        "--budget", type=float, default=2400.0, help="seconds of building before larger sizes are skipped"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    parser.add_argument("--only-replicas", action="store_true", help="run only the replica throughput part")
    parser.add_argument("--only-long-history", action="store_true", help="run only the long-history part")
    parser.add_argument("--only-neighbours", action="store_true", help="run only the other-tenants part")
    parser.add_argument(
        "--analyze-early", action="store_true", help="--only-neighbours: ANALYZE the store after its first 100 lines"
    )
    args = parser.parse_args()
    if not args.dataset.is_file():
        sys.exit(f"LoCoMo dataset not found at {args.dataset}: pass --dataset PATH/locomo10.json")
    locomo.DATASET = args.dataset
    lines, questions = corpus()
    report: list[str] = []
    cluster = TemporaryCluster(settings={"fsync": "on", "full_page_writes": "on", "shared_buffers": "256MB"})
    with cluster, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with cluster.admin() as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
        print(f"PostgreSQL {version}, python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)

        part = None
        if args.only_neighbours:
            part = neighbours(cluster, lines, questions, analyze_early=args.analyze_early)
        elif args.only_long_history:
            part = long_history(cluster, tmp, lines, questions)
        if part is not None:
            report = [f"PostgreSQL {version}, Python {sys.version.split()[0]}.\n", *part]
            print("\n".join(report))
            if args.out:
                args.out.write_text("\n".join(report) + "\n")
            return
        if args.only_replicas:
            throughput = {n: replica_throughput(cluster, tmp, n) for n in (1, 2)}
            print(throughput, CPU_SHARES)
            return
        # 4. LoCoMo quality first: it is the gate.
        data = locomo.load()
        quality: dict[str, dict[int, float]] = {}
        latency: dict[str, list[float]] = {}
        with stores(tmp, cluster, "locomo") as vaults:
            for name, vault in vaults.items():
                where, _notes = locomo.build(vault, data)
                quality[name], _n, latency[name] = locomo.evaluate(vault, data, where)
                print(f"  LoCoMo {name}: {quality[name]}", flush=True)

        with stores(tmp, cluster, "rate") as vaults:
            rates = retain_rate(vaults, lines)
        print(f"  retain rate: {rates}", flush=True)

        throughput = {n: replica_throughput(cluster, tmp, n) for n in (1, 2)}
        print(f"  replicas: {throughput}", flush=True)

        sizes = [int(s) for s in args.sizes.split(",") if s]
        with stores(tmp, cluster, "scale") as vaults:
            rows = scale(vaults, lines, questions, sizes, args.budget)

    report.append(
        f"PostgreSQL {version} (local, fsync on), SQLite via Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores shared with other jobs.\n"
    )
    report.append("| LoCoMo (categories 1-4) | recall@1 | recall@5 | recall@10 | recall@20 | recall p50 |")
    report.append("|---|---|---|---|---|---|")
    for name in ("sqlite", "postgres"):
        q = quality[name]
        report.append(
            f"| {name} | {q[1]:.3f} | {q[5]:.3f} | {q[10]:.3f} | {q[20]:.3f} | {ms(statistics.median(latency[name]))} |"
        )
    report.append("\n| single retains (one at a time, committed) | per second |")
    report.append("|---|---|")
    for name, rate in rates.items():
        report.append(f"| {name} | {rate:.0f} |")
    report.append("\n| store size | sqlite p50 | sqlite p95 | postgres p50 | postgres p95 | postgres build |")
    report.append("|---|---|---|---|---|---|")
    for row in rows:
        s, p = row["sqlite"], row["postgres"]
        report.append(
            f"| {row['lines']:,} lines | {ms(s['p50'])} | {ms(s['p95'])} | {ms(p['p50'])} | {ms(p['p95'])} |"
            f" {p['build_s']:.0f} s |"
        )
    report.append(
        "\n| `memvault serve` replicas on one database, 8 writer threads | appends per second |"
        " CPU: clients | CPU: replicas | CPU: PostgreSQL |"
    )
    report.append("|---|---|---|---|---|")
    for n, value in throughput.items():
        cpu = CPU_SHARES.get(n, {})
        report.append(
            f"| {n} | {value:.0f} | {cpu.get('clients', 0):.2f} | {cpu.get('replicas', 0):.2f} |"
            f" {cpu.get('postgres', 0):.2f} |"
        )
    report.append("\n(CPU: cores busy on average, out of the machine's cores.)")
    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
