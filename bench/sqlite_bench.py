"""Benchmarks of the sqlite provider, all measured in one run (figures: bench/results/sqlite.md).

1. Retain rate: single committed retains per second through ``vault.retain``,
   against raw SQLite single-row inserts with the same pragmas (WAL,
   ``synchronous``, ``secure_delete``), one commit each.
2. Recall latency p50/p95 at 10k, 100k and 1M lines (1,000 lines per
   partition, LoCoMo turns and questions), against the partition-only floor:
   the same recalls on a database holding only the queried partition. The raw
   FTS5 MATCH times of the three designs the issue compares are measured too.
3. Forget (erasure, with FTS optimize and WAL checkpoint) latency at 100k lines.
4. LoCoMo recall@1/5/10/20 through ``vault.recall``.

Large databases are built once, in bulk through the provider's own indexing
code, and cached under ``$TMPDIR/memvault-sqlite-bench-<hash of the schema and
ranking sources>``; delete that folder to rebuild.

Run: ``python bench/sqlite_bench.py`` (``--quick`` skips the 1M size).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import hashlib
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import memvault
import memvault.search
import memvault_sqlite.schema as schema
import memvault_sqlite.search as search
from memvault_sqlite import SqliteProvider

sys.path.insert(0, str(Path(__file__).parent))
import sqlite_locomo as locomo

LINES_PER_PARTITION = 1000
DAYS = 4
QUERIES = 200
PARTITIONS_SAMPLED = 25
random.seed(7)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


# -- 1. retain rate ------------------------------------------------------------


def raw_table(path: Path, synchronous: str) -> sqlite3.Connection:
    """The raw-insert baseline: one plain table in a WAL file with the provider's pragmas."""
    raw = sqlite3.connect(str(path), isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute(f"PRAGMA synchronous = {synchronous}")
    raw.execute("PRAGMA secure_delete = ON")
    raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    return raw


def retain_rate(tmp: Path, n: int = 400, synchronous: str = "full") -> dict[str, float]:
    """Provider retains and raw inserts, alternated one by one so both see the same machine load."""
    vault = memvault.open("sqlite", path=str(tmp / f"rate-{synchronous}.db"), scanner="off", synchronous=synchronous)
    raw = raw_table(tmp / f"raw-{synchronous}.db", synchronous)
    line = "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.\n"
    provider_s = raw_s = 0.0
    provider_each: list[float] = []
    raw_each: list[float] = []
    for i in range(n):
        request = memvault.RetainRequest(
            workspace_id="w", agent_id="a", tier="daily", key=f"2024-01-{1 + i // 100:02d}", content=line, mode="append"
        )
        start = time.perf_counter()
        vault.retain(request)
        provider_each.append(time.perf_counter() - start)
        provider_s += provider_each[-1]
        start = time.perf_counter()
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO t (body) VALUES (?)", (line,))
        raw.execute("COMMIT")
        raw_each.append(time.perf_counter() - start)
        raw_s += raw_each[-1]
    vault.close()
    raw.close()
    return {
        "provider": n / provider_s,
        "raw": n / raw_s,
        "provider_p50": statistics.median(provider_each),
        "raw_p50": statistics.median(raw_each),
    }


def retain_many_rate(tmp: Path, n: int = 1024, synchronous: str = "full") -> dict[str, float]:
    """``vault.retain_many`` in lists of 64 against 64 raw single-row inserts, and 64 raw inserts in one
    transaction, alternated list by list (issue 18, target 6; contract P34)."""
    vault = memvault.open("sqlite", path=str(tmp / f"many-{synchronous}.db"), scanner="off", synchronous=synchronous)
    raw = raw_table(tmp / f"raw-many-{synchronous}.db", synchronous)
    line = "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.\n"
    group = 64
    many_s = single_s = batched_s = 0.0
    for start_at in range(0, n, group):
        requests = [
            memvault.RetainRequest(
                workspace_id="w",
                agent_id="a",
                tier="daily",
                key=f"2024-01-{1 + i // 100:02d}",
                content=line,
                mode="append",
            )
            for i in range(start_at, start_at + group)
        ]
        start = time.perf_counter()
        outcomes = vault.retain_many(requests)
        many_s += time.perf_counter() - start
        assert all(isinstance(o, memvault.RetainResult) for o in outcomes), outcomes
        start = time.perf_counter()
        for _ in range(group):
            raw.execute("BEGIN IMMEDIATE")
            raw.execute("INSERT INTO t (body) VALUES (?)", (line,))
            raw.execute("COMMIT")
        single_s += time.perf_counter() - start
        start = time.perf_counter()
        raw.execute("BEGIN IMMEDIATE")
        for _ in range(group):
            raw.execute("INSERT INTO t (body) VALUES (?)", (line,))
        raw.execute("COMMIT")
        batched_s += time.perf_counter() - start
    vault.close()
    raw.close()
    return {"many": n / many_s, "raw": n / single_s, "raw_batched": n / batched_s}


# -- 2. scale --------------------------------------------------------------------


def corpus() -> tuple[list[str], list[str]]:
    data = locomo.load(locomo.DATASET)
    lines: list[str] = []
    questions: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        for key in sorted(conv, key=lambda k: (len(k), k)):
            if key.startswith("session_") and isinstance(conv[key], list):
                lines.extend(locomo.turn_line(t) for t in conv[key])
        questions.extend(str(q["question"]) for q in sample["qa"] if q.get("category") in (1, 2, 3, 4))
    return lines, questions


def partition_lines(lines: list[str], p: int) -> list[str]:
    start = (p * 997) % len(lines)
    return [lines[(start + i) % len(lines)] for i in range(LINES_PER_PARTITION)]


def bulk_build(path: Path, partitions: list[int], lines: list[str]) -> None:
    """Retain 1,000 lines per partition as DAYS daily documents, day by day across partitions.

    Uses the provider's own indexing (``schema.reindex_document``) in large
    transactions, so the index has the shape many small retains give it.
    """
    SqliteProvider(path=str(path), synchronous="off").close()
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    per_day = LINES_PER_PARTITION // DAYS
    stamp = schema.now_iso()
    for day in range(DAYS):
        for chunk in range(0, len(partitions), 50):
            conn.execute("BEGIN IMMEDIATE")
            for p in partitions[chunk : chunk + 50]:
                pid = schema.partition_id(conn, "bench", "agent", f"agent-{p}", create=True)
                assert pid is not None
                body = "".join(ln + "\n" for ln in partition_lines(lines, p)[day * per_day : (day + 1) * per_day])
                key = f"2024-01-{day + 1:02d}"
                cur = conn.execute(
                    "INSERT INTO documents (partition_id, workspace_id, agent_id, tier, key, label, body, size,"
                    " created_at, updated_at) VALUES (?, 'bench', ?, 'daily', ?, ?, ?, ?, ?, ?)",
                    (pid, f"agent-{p}", key, f"daily/{key}.md", body, len(body.encode()), stamp, stamp),
                )
                schema.reindex_document(conn, int(cur.lastrowid or 0), pid, "", body)
            conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def source_hash() -> str:
    """What the cached databases depend on: the schema and what indexing makes of sample text."""
    sample = " ".join(lines_sample())
    h = hashlib.sha256()
    h.update(
        f"{schema.SCHEMA_VERSION}/{schema.LINE_BITS}/{schema.FTS_SHARDS}/{schema._FTS_DDL}/{schema._V2}/{LINES_PER_PARTITION}/{DAYS}".encode()
    )
    h.update(repr(memvault.search.stored_line(1, sample)).encode())
    return h.hexdigest()[:12]


def lines_sample() -> list[str]:
    return ["Caroline: Researching adoption agencies — it's been a dream to have a family!", "Ünïcode naïve café"]


def cached_db(cache: Path, n_partitions: int, lines: list[str]) -> tuple[Path, float]:
    path = cache / f"scale-{n_partitions}.db"
    if path.exists():
        return path, 0.0
    start = time.perf_counter()
    tmp = path.with_suffix(".building")
    for extra in ("", "-wal", "-shm"):
        Path(f"{tmp}{extra}").unlink(missing_ok=True)
    bulk_build(tmp, list(range(n_partitions)), lines)
    tmp.rename(path)
    return path, time.perf_counter() - start


def recall_once(vault: memvault.Vault, p: int, q: str) -> float:
    start = time.perf_counter()
    vault.recall(memvault.RecallRequest(workspace_id="bench", agent_id=f"agent-{p}", query=q))
    return time.perf_counter() - start


def warm(path: Path) -> None:
    """Read the file once so the OS page cache holds it, as it does for a database in use."""
    with path.open("rb") as fh:
        while fh.read(1 << 24):
            pass


def raw_match_times(path: Path, queries: list[tuple[int, str]]) -> dict[str, list[float]]:
    """The bare FTS5 candidate query (no ranking), by rowid range and, for comparison, unfiltered."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    pids = {
        owner: pid for pid, owner in conn.execute("SELECT id, owner_id FROM partitions WHERE workspace_id = 'bench'")
    }
    ranged: list[float] = []
    unranged: list[float] = []
    for p, q in queries:
        terms = memvault.search.index_terms(memvault.search.Query.parse(q))
        if not terms:
            continue
        pid = pids[f"agent-{p}"]
        low = pid << schema.LINE_BITS
        fts = schema.fts_table(pid)
        match = search.fts_query(terms)
        by_range = (
            f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? AND rowid BETWEEN ? AND ?",
            (match, low, low + (1 << schema.LINE_BITS) - 1),
        )
        # The design the rowid range replaces: a MATCH over the whole table, filtered afterwards.
        by_filter = (
            f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? AND (rowid >> ?) = ?",
            (match, schema.LINE_BITS, pid),
        )
        for sql, params in (by_range, by_filter):  # untimed: both find their pages cached
            conn.execute(sql, params).fetchall()
        for sql, params, out in ((*by_range, ranged), (*by_filter, unranged)):
            start = time.perf_counter()
            conn.execute(sql, params).fetchall()
            out.append(time.perf_counter() - start)
    conn.close()
    return {"ranged": ranged, "global": unranged}


def engine_floor_db(lines: list[tuple[int, str]]) -> sqlite3.Connection:
    """The engine's floor: a plain FTS5 table (positions, sizes, bm25) holding only one partition's lines.

    It is indexed on the same index terms the provider stores, so the same MATCH
    expression finds the same lines; ``ORDER BY rank LIMIT 20`` is FTS5's own
    BM25 top-20, the least work a ranked answer to the question takes.
    """
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5 (terms, tokenize = \"ascii tokenchars '_'\")")
    conn.executemany("INSERT INTO f (rowid, terms) VALUES (?, ?)", lines)
    return conn


def engine_floor_once(conn: sqlite3.Connection, q: str) -> float:
    terms = memvault.search.index_terms(memvault.search.Query.parse(q))
    start = time.perf_counter()
    if terms:
        sql = "SELECT rowid, terms FROM f WHERE f MATCH ? ORDER BY rank LIMIT 20"
        conn.execute(sql, (search.fts_query(terms),)).fetchall()
    return time.perf_counter() - start


def partition_terms(path: Path, owner: str) -> list[tuple[int, str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT l.id, l.terms FROM lines AS l JOIN documents AS d ON d.id = l.document_id"
        " JOIN partitions AS p ON p.id = d.partition_id WHERE p.owner_id = ?",
        (owner,),
    ).fetchall()
    conn.close()
    return rows


def scale(cache: Path, sizes: list[int], lines: list[str], questions: list[str]) -> list[dict[str, Any]]:
    """Each recall is timed on the big database and, right after, on its partition alone.

    Interleaving the two keeps their ratio honest on a shared, noisy machine.
    """
    results = []
    alone_dir = cache / "alone"
    alone_dir.mkdir(exist_ok=True)
    for n_partitions in sizes:
        path, built = cached_db(cache, n_partitions, lines)
        targets = random.sample(range(n_partitions), min(PARTITIONS_SAMPLED, n_partitions))
        queries = [(p, random.choice(questions)) for p in targets for _ in range(QUERIES // len(targets))]
        random.shuffle(queries)
        alone_vaults: dict[int, memvault.Vault] = {}
        for p in targets:
            alone = alone_dir / f"p{p}.db"
            if not alone.exists():
                bulk_build(alone, [p], lines)
            alone_vaults[p] = memvault.open("sqlite", path=str(alone), scanner="off")
        engines = {p: engine_floor_db(partition_terms(path, f"agent-{p}")) for p in targets}
        warm(path)
        full: list[float] = []
        floor: list[float] = []
        engine: list[float] = []
        with memvault.open("sqlite", path=str(path), scanner="off") as vault:
            for p, q in queries[:10]:  # warm SQLite's own caches
                recall_once(vault, p, q)
                recall_once(alone_vaults[p], p, q)
            for p, q in queries:
                full.append(recall_once(vault, p, q))
                floor.append(recall_once(alone_vaults[p], p, q))
                engine.append(engine_floor_once(engines[p], q))
        for v in alone_vaults.values():
            v.close()
        raw = raw_match_times(path, queries[:60])
        raw_floor: list[float] = []
        for p in targets:
            raw_floor.extend(
                raw_match_times(alone_dir / f"p{p}.db", [(pp, q) for pp, q in queries if pp == p])["ranged"]
            )
        results.append(
            {
                "lines": n_partitions * LINES_PER_PARTITION,
                "partitions": n_partitions,
                "built_s": built,
                "db_mb": path.stat().st_size / 1e6,
                "p50": statistics.median(full),
                "p95": pct(full, 0.95),
                "floor_p50": statistics.median(floor),
                "floor_p95": pct(floor, 0.95),
                "engine_p50": statistics.median(engine),
                "ratios": sorted(f / e for f, e in zip(full, engine, strict=True) if e > 0),
                "raw_p50": statistics.median(raw["ranged"]),
                "raw_floor_p50": statistics.median(raw_floor),
                "raw_global_p50": statistics.median(raw["global"]),
            }
        )
    return results


def forget_cost(cache: Path, n_partitions: int, lines: list[str], samples: int = 5) -> list[float]:
    """Forget one document at a time on a copy of the cached database."""
    path, _ = cached_db(cache, n_partitions, lines)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(path, copy)
        times = []
        with memvault.open("sqlite", path=str(copy), scanner="off") as vault:
            for p in random.sample(range(n_partitions), samples):
                start = time.perf_counter()
                removed = vault.forget(
                    memvault.ForgetRequest(workspace_id="bench", agent_id=f"agent-{p}", id="daily/2024-01-01.md")
                )
                times.append(time.perf_counter() - start)
                assert removed.removed == 1
    return times


#: The query shapes of :func:`common_terms` (also timed per provider by ranking_bench.py).
COMMON_TERM_SHAPES: dict[str, str] = {
    "five common words": "apple river garden music family",
    "two common words": "apple garden",
    "one common word": "river",
    "a rare word": "topic190",
    "common + rare": "apple river topic150",
    "a phrase": "apple river",
}


def common_term_lines(n_lines: int) -> list[str]:
    """``Speaker: ...`` lines of 12 words drawn from 215 with Zipf weights (the commonest in ~40 % of lines)."""
    rng = random.Random(11)
    words = ["apple", "river", "garden", "music", "family", "school", "travel", "painting", "friend", "dog"]
    words += [f"topic{i}" for i in range(205)]
    weights = [1 / (i + 1) for i in range(len(words))]
    return [f"Speaker: {' '.join(rng.choices(words, weights, k=12))}" for _ in range(n_lines)]


def common_terms(tmp: Path, n_lines: int = 10_000, rounds: int = 25) -> list[dict[str, Any]]:
    """One partition of ``n_lines`` lines over a small vocabulary; query shapes against the engine floor.

    Lines are 12 words drawn from 215 words with Zipf weights (the commonest in
    ~40 % of the lines), as ``Speaker: ...`` turns in 250-line daily documents.
    Each query shape is timed through ``vault.recall`` and as FTS5's bm25 top-20
    on a table holding only those lines, interleaved call by call.
    """
    body_lines = common_term_lines(n_lines)
    shapes = COMMON_TERM_SHAPES
    results = []
    # idle_merge=0: the index as the writes left it, not merged halfway through the timing (see merge_effect).
    with memvault.open("sqlite", path=str(tmp / "common.db"), scanner="off", synchronous="off", idle_merge=0) as vault:
        per_doc = 250
        for d in range(0, n_lines, per_doc):
            day = 1 + d // per_doc
            key = f"2024-{1 + (day - 1) // 28:02d}-{1 + (day - 1) % 28:02d}"
            chunk = "".join(line + "\n" for line in body_lines[d : d + per_doc])
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="w", agent_id="a", tier="daily", key=key, content=chunk, mode="append"
                )
            )
        engine = engine_floor_db(partition_terms(tmp / "common.db", "a"))
        for name, q in shapes.items():
            request = memvault.RecallRequest(workspace_id="w", agent_id="a", query=q, limit=20)
            ours: list[float] = []
            floor: list[float] = []
            matches = len(vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query=q, limit=100)).hits)
            for _ in range(rounds):
                start = time.perf_counter()
                vault.recall(request)
                ours.append(time.perf_counter() - start)
                floor.append(engine_floor_once(engine, q))
            terms = memvault.search.index_terms(memvault.search.Query.parse(q))
            lines_matching = engine.execute(
                "SELECT count(*) FROM f WHERE f MATCH ?", (search.fts_query(terms),)
            ).fetchone()[0]
            results.append(
                {
                    "shape": name,
                    "query": q,
                    "matching": lines_matching,
                    "hits": matches,
                    "p50": statistics.median(ours),
                    "floor_p50": statistics.median(floor),
                }
            )
    return results


def write_history(vault: memvault.Vault, n_documents: int = 3000) -> dict[str, list[str]]:
    """Append ``n_documents`` daily documents of three LoCoMo turns each to agent ``a`` of workspace ``w``
    (one line in a hundred days names a narwhal); the query shapes to time on them."""
    lines, questions = corpus()
    rng = random.Random(17)
    day = _dt.date(2015, 1, 1)
    for d in range(n_documents):
        key = (day + _dt.timedelta(days=d)).isoformat()
        day_lines = rng.sample(lines, 3)
        if d % 100 == 0:  # a rare word: on 30 of the 9,000 lines
            day_lines[0] = "Dana: we saw a narwhal at the aquarium today"
        body = "".join(line + "\n" for line in day_lines)
        vault.retain(
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="daily", key=key, content=body, mode="append")
        )
    return {"LoCoMo questions": rng.sample(questions, 40), "a rare word": ["narwhal"]}


def long_history(tmp: Path, n_documents: int = 3000, rounds: int = 200) -> list[dict[str, Any]]:
    """One agent partition of ``n_documents`` small daily documents (years of daily notes); recall
    against the engine floor, interleaved call by call.

    Three lines a day from the LoCoMo turns, 9,000 lines in all (one line in a hundred
    days names a narwhal): a question's cost should follow the lines it matches, not
    how many documents the agent has.
    """
    results = []
    with memvault.open("sqlite", path=str(tmp / "history.db"), scanner="off", synchronous="off", idle_merge=0) as vault:
        shapes = write_history(vault, n_documents)
        engine = engine_floor_db(partition_terms(tmp / "history.db", "a"))
        for name, picked in shapes.items():
            ours: list[float] = []
            floor: list[float] = []
            for i in range(rounds):
                q = picked[i % len(picked)]
                request = memvault.RecallRequest(workspace_id="w", agent_id="a", query=q, limit=20)
                start = time.perf_counter()
                vault.recall(request)
                ours.append(time.perf_counter() - start)
                floor.append(engine_floor_once(engine, q))
            results.append({"shape": name, "p50": statistics.median(ours), "floor_p50": statistics.median(floor)})
    return results


def merge_effect(tmp: Path, lines: list[str], questions: list[str], n_partitions: int = 10) -> dict[str, Any]:
    """The index as single retains leave it, and after the idle merge, on the same lines.

    ``n_partitions`` agents of 1,000 LoCoMo lines each, retained one line per call, the
    partitions taking turns (each shard gets a segment per line, as agents writing turn by
    turn give it). Two copies of that file: one as written, one after ``merge_index`` (what
    the idle merge does once a shard has been quiet). LoCoMo questions are timed on both
    and on the engine floor, interleaved call by call. Then the writers' side: the first
    retain after a pause long enough for merge steps to start, with the idle merge on and off.
    """
    written = tmp / "written.db"
    with memvault.open("sqlite", path=str(written), scanner="off", synchronous="off", idle_merge=0) as vault:
        per = {p: partition_lines(lines, p) for p in range(n_partitions)}
        for i in range(LINES_PER_PARTITION):
            key = f"2024-01-{1 + i // 40:02d}"  # 40 lines a day: 25 daily documents
            for p in range(n_partitions):
                vault.retain(
                    memvault.RetainRequest(
                        workspace_id="bench",
                        agent_id=f"agent-{p}",
                        tier="daily",
                        key=key,
                        content=per[p][i] + "\n",
                        mode="append",
                    )
                )
    merged = tmp / "merged.db"
    for extra in ("", "-wal", "-shm"):
        if Path(f"{written}{extra}").exists():
            shutil.copyfile(f"{written}{extra}", f"{merged}{extra}")

    def segments(path: Path) -> list[int]:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            shapes = [schema.fts_shape(conn, shard) for shard in range(schema.FTS_SHARDS)]
        return [shape[1] for shape in shapes if shape is not None and shape[1] > 0]

    with memvault.open("sqlite", path=str(merged), scanner="off", idle_merge=0) as vault:
        start = time.perf_counter()
        steps = vault.provider.merge_index()
        merge_s = time.perf_counter() - start
    engines = {p: engine_floor_db(partition_terms(written, f"agent-{p}")) for p in range(n_partitions)}
    rng = random.Random(5)
    queries = [(rng.randrange(n_partitions), rng.choice(questions)) for _ in range(QUERIES * 2)]
    times: dict[str, list[float]] = {"written": [], "merged": [], "engine": []}
    with (
        memvault.open("sqlite", path=str(written), scanner="off", idle_merge=0) as as_written,
        memvault.open("sqlite", path=str(merged), scanner="off", idle_merge=0) as after,
    ):
        for p, q in queries[:20]:
            recall_once(as_written, p, q)
            recall_once(after, p, q)
        for j, (p, q) in enumerate(queries):
            pair = [("written", as_written), ("merged", after)]
            for name, vault in pair if j % 2 else pair[::-1]:
                times[name].append(recall_once(vault, p, q))
            times["engine"].append(engine_floor_once(engines[p], q))
    first: dict[str, list[float]] = {}
    for idle in (0.0, 0.05):
        path = tmp / f"writers-{idle}.db"
        first[f"idle_merge={idle:g}"] = after_pauses = []
        with memvault.open("sqlite", path=str(path), scanner="off", synchronous="normal", idle_merge=idle) as vault:
            for burst in range(60):
                for i in range(12):
                    vault.retain(
                        memvault.RetainRequest(
                            workspace_id="bench",
                            agent_id=f"agent-{i % 4}",
                            tier="daily",
                            key=f"2024-02-{1 + burst % 28:02d}",
                            content=f"{lines[(burst * 12 + i) % len(lines)]}\n",
                            mode="append",
                        )
                    )
                time.sleep(0.08)  # past idle_merge: merge steps have started on the four shards
                start = time.perf_counter()
                vault.retain(
                    memvault.RetainRequest(
                        workspace_id="bench",
                        agent_id=f"agent-{burst % 4}",
                        tier="daily",
                        key="2024-01-01",
                        content="one more line after a pause\n",
                        mode="append",
                    )
                )
                after_pauses.append(time.perf_counter() - start)
    return {
        "segments_written": segments(written),
        "segments_merged": segments(merged),
        "merge_steps": steps,
        "merge_s": merge_s,
        "written_p50": statistics.median(times["written"]),
        "merged_p50": statistics.median(times["merged"]),
        "engine_p50": statistics.median(times["engine"]),
        "first_retain": {k: (statistics.median(v), max(v)) for k, v in first.items()},
    }


# -- main -----------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1M-line size")
    parser.add_argument(
        "--sizes", type=int, nargs="*", help="partitions of 1,000 lines per database (default 10 100 1000)"
    )
    parser.add_argument("--data", type=Path, default=locomo.DATASET, help="locomo10.json (default: %(default)s)")
    args = parser.parse_args()
    locomo.DATASET = args.data
    cache = Path(tempfile.gettempdir()) / f"memvault-sqlite-bench-{source_hash()}"
    cache.mkdir(exist_ok=True)
    started = time.perf_counter()
    print(f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, cache {cache}")

    with tempfile.TemporaryDirectory() as tmp:
        for sync in ("full", "normal"):
            rate = retain_rate(Path(tmp), synchronous=sync)
            print(
                f"retain rate (synchronous={sync}): provider {rate['provider']:.0f}/s, raw inserts "
                f"{rate['raw']:.0f}/s, ratio {rate['provider'] / rate['raw']:.2f}; per call p50 provider "
                f"{rate['provider_p50'] * 1e6:.0f} us, raw {rate['raw_p50'] * 1e6:.0f} us, "
                f"ratio {rate['raw_p50'] / rate['provider_p50']:.2f}"
            )
            many = retain_many_rate(Path(tmp), synchronous=sync)
            print(
                f"retain_many rate (synchronous={sync}, lists of 64): provider {many['many']:.0f}/s, raw single-row "
                f"inserts {many['raw']:.0f}/s, ratio {many['many'] / many['raw']:.2f}; raw inserts 64 per "
                f"transaction {many['raw_batched']:.0f}/s, ratio {many['many'] / many['raw_batched']:.2f}"
            )

    with tempfile.TemporaryDirectory() as tmp:
        for row in common_terms(Path(tmp)):
            print(
                f"10,000-line partition, {row['shape']} ({row['query']!r}, {row['matching']:,} lines match): "
                f"recall p50 {ms(row['p50'])}; engine floor p50 {ms(row['floor_p50'])}; "
                f"ratio {row['p50'] / row['floor_p50']:.2f}"
            )

    with tempfile.TemporaryDirectory() as tmp:
        for row in long_history(Path(tmp)):
            print(
                f"one partition of 3,000 daily documents (9,000 lines), {row['shape']}: recall p50 {ms(row['p50'])}; "
                f"engine floor p50 {ms(row['floor_p50'])}; ratio {row['p50'] / row['floor_p50']:.2f}"
            )

    lines, questions = corpus()
    sizes = args.sizes or ([10, 100] if args.quick else [10, 100, 1000])
    for row in scale(cache, sizes, lines, questions):
        print(
            f"recall at {row['lines']:>9,} lines ({row['partitions']} partitions, {row['db_mb']:.0f} MB"
            f"{', built in {:.0f} s'.format(row['built_s']) if row['built_s'] else ''}): p50 {ms(row['p50'])}, "
            f"p95 {ms(row['p95'])}; partition-only floor p50 {ms(row['floor_p50'])}, p95 {ms(row['floor_p95'])}; "
            f"ratio p50 {row['p50'] / row['floor_p50']:.2f}; engine floor (FTS5 bm25 top-20 on the partition's "
            f"lines alone) p50 {ms(row['engine_p50'])}, recall / engine floor p50 {row['p50'] / row['engine_p50']:.2f} "
            f"(per question: median {statistics.median(row['ratios']):.2f}, p90 {pct(row['ratios'], 0.9):.2f}); "
            f"raw ranged MATCH p50 {ms(row['raw_p50'])} "
            f"(floor {ms(row['raw_floor_p50'])}; global MATCH filtered by partition {ms(row['raw_global_p50'])})"
        )

    with tempfile.TemporaryDirectory() as tmp:
        m = merge_effect(Path(tmp), lines, questions)
        print(
            f"written by single retains (10 partitions x 1,000 lines, one line per retain), LoCoMo questions: "
            f"recall p50 as written {ms(m['written_p50'])} (segments per shard {min(m['segments_written'])}-"
            f"{max(m['segments_written'])}), after the idle merge {ms(m['merged_p50'])} (segments "
            f"{min(m['segments_merged'])}-{max(m['segments_merged'])}), "
            f"ratio {m['merged_p50'] / m['written_p50']:.3f}; "
            f"engine floor p50 {ms(m['engine_p50'])}: {m['written_p50'] / m['engine_p50']:.2f}x as written, "
            f"{m['merged_p50'] / m['engine_p50']:.2f}x merged; merge_index {m['merge_steps']} steps in "
            f"{m['merge_s'] * 1e3:.0f} ms; the first retain after a pause (p50 / max): "
            + ", ".join(f"{k} {v[0] * 1e6:.0f} / {v[1] * 1e6:.0f} us" for k, v in m["first_retain"].items())
        )

    for n_partitions in sizes:
        times = forget_cost(cache, n_partitions, lines, samples=5 if n_partitions < 1000 else 3)
        print(
            f"forget one daily document (erasure: FTS optimize + WAL checkpoint) at "
            f"{n_partitions * LINES_PER_PARTITION:,} lines: p50 {ms(statistics.median(times))}, max {ms(max(times))}"
        )

    data = locomo.load(locomo.DATASET)
    with (
        tempfile.TemporaryDirectory() as tmp,
        memvault.open("sqlite", path=f"{tmp}/locomo.db", synchronous="normal") as vault,
    ):
        where, notes = locomo.build(vault, data)
        for name, subset in locomo.SPLITS.items():
            recall, n_questions, latencies = locomo.evaluate(vault, [data[i] for i in subset], where)
            print(
                f"LoCoMo {name} ({n_questions} questions, categories 1-4) through vault.recall: "
                + ", ".join(f"recall@{k} {v:.3f}" for k, v in recall.items())
                + f"; recall p50 {ms(statistics.median(latencies))}, p95 {ms(pct(latencies, 0.95))}"
            )
    for note in notes:
        print(f"  note: {note}")
    print(f"bench took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
