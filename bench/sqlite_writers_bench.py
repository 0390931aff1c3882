"""Concurrent writers on the sqlite provider: in process against `memvault serve` (issue 18, target 3).

16 threads append for a few seconds, each call timed, in four runs that share
one temporary directory and the same vault settings (sqlite, default scanner):

* ``in-process``: the threads call one ``Vault`` on the sqlite file (the baseline);
* ``service``: the threads call one ``http-remote`` client of ``memvault serve``
  on another file (the client sends the retains its threads make while one is
  in flight as one batch; the service runs a batch as one ``retain_many``);
* ``service, batch_max=1``: the same service through a client that sends every
  retain alone (the service before batching), as the baseline of the batching;

each with two shapes: ``distinct`` (every thread its own agent's daily
document) and ``shared`` (all threads append to one daily document). A daily
document moves to the next date every 400 appends, so no run reaches the
30,000-byte cap.

Reported per run: appends per second, per-call p50, p99 and max, p99/p50, and
the service's rate against the in-process rate measured in the same run. The
runs alternate (in-process, service, service with batch_max=1) per shape, ``--rounds`` times; the table
gives the median of each figure over the rounds.

    python bench/sqlite_writers_bench.py [--threads 16] [--seconds 5] [--rounds 3] [--out FILE]

Targets: p99 within 10x of p50 under that load; the service at least 0.8x of
the in-process rate.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from http_bench import TOKEN, server_cpu_seconds, start_server  # one way to start the service for every bench

import memvault

WORKSPACE = "bench"  # the workspace http_bench's token may use
PER_DOCUMENT = 400  # appends per daily document before the next date (keeps it under the cap)
DAY0 = _dt.date(2026, 1, 1)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Load:
    """``threads`` writers appending through ``vault`` for ``seconds``; every call's wall time."""

    def __init__(self, vault: memvault.Vault, shape: str, threads: int, tag: str) -> None:
        self.vault = vault
        self.shape = shape
        self.threads = threads
        self.tag = tag
        self.counter = 0
        self.per_thread = [0] * threads
        self.lock = threading.Lock()
        #: One example of each distinct failure (type and message).
        self.errors: dict[str, memvault.MemvaultError] = {}

    def request(self, thread: int) -> memvault.RetainRequest:
        with self.lock:
            n = self.counter
            self.counter += 1
            mine = self.per_thread[thread]
            self.per_thread[thread] += 1
        if self.shape == "shared":
            agent, seq = f"{self.tag}-shared", n
        else:  # each thread's own count moves its document on (an unfair lock gives some threads far more)
            agent, seq = f"{self.tag}-t{thread}", mine
        day = DAY0 + _dt.timedelta(days=seq // PER_DOCUMENT)
        return memvault.RetainRequest(
            workspace_id=WORKSPACE,
            agent_id=agent,
            tier="daily",
            key=day.isoformat(),
            content=f"- writer {thread} note {n}: the meeting moved to room {n % 97}\n",
            mode="append",
        )

    def run(self, seconds: float) -> tuple[float, list[float], int]:
        """(appends per second, call times in ms, failures)."""
        times: list[list[float]] = [[] for _ in range(self.threads)]
        failures = [0] * self.threads
        start_gate = threading.Barrier(self.threads + 1)
        stop = [0.0]

        def worker(i: int) -> None:
            start_gate.wait()
            while time.perf_counter() < stop[0]:
                request = self.request(i)
                began = time.perf_counter()
                try:
                    self.vault.retain(request)
                except memvault.MemvaultError as exc:
                    failures[i] += 1
                    self.errors.setdefault(f"{type(exc).__name__}: {str(exc)[:60]}...", exc)
                    continue
                times[i].append((time.perf_counter() - began) * 1000)

        pool = [threading.Thread(target=worker, args=(i,)) for i in range(self.threads)]
        for t in pool:
            t.start()
        began = time.perf_counter()
        stop[0] = began + seconds
        start_gate.wait()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - began
        flat = [x for per in times for x in per]
        return len(flat) / elapsed, flat, sum(failures)


def lines_in(db: Path, agent_prefix: str) -> int:
    """Appended lines stored for the run's agents (read by a separate connection: nothing lost)."""
    conn = sqlite3.connect(str(db))
    try:
        bodies = conn.execute(
            "SELECT body FROM documents WHERE workspace_id = ? AND agent_id LIKE ?", (WORKSPACE, agent_prefix + "%")
        ).fetchall()
    finally:
        conn.close()
    return sum(body.count("\n") for (body,) in bodies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    args = parser.parse_args()
    rows: dict[tuple[str, str], list[tuple[float, float, float, float, int, float]]] = {}
    checks: list[str] = []
    failures_seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="memvault-writers-bench-") as tmp:
        root = Path(tmp)
        local_db, served_db = root / "local.db", root / "served.db"
        local = memvault.open("sqlite", path=str(local_db))
        proc, url = start_server(root, served_db)
        remote = memvault.open("http-remote", url=url, token=TOKEN, scanner="off")
        # The same service through a client that sends every retain alone: the service before batching.
        unbatched = memvault.open("http-remote", url=url, token=TOKEN, scanner="off", batch_max=1)
        try:
            paths: dict[str, tuple[memvault.Vault, Path]] = {
                "in-process": (local, local_db),
                "service": (remote, served_db),
                "service, batch_max=1": (unbatched, served_db),
            }
            for r in range(args.rounds):
                for shape in ("distinct", "shared"):
                    for path, (vault, db) in paths.items():
                        tag = f"r{r}-{shape}-{path.replace('service, batch_max=1', 'single')}"
                        load = Load(vault, shape, args.threads, tag)
                        load.run(args.warmup)
                        before = lines_in(db, tag)
                        cpu_before = time.process_time() + server_cpu_seconds(proc.pid)
                        rate, times, failed = load.run(args.seconds)
                        cpu = time.process_time() + server_cpu_seconds(proc.pid) - cpu_before
                        stored = lines_in(db, tag) - before
                        for message in load.errors:
                            failures_seen.setdefault(message, tag)
                        if stored != len(times):
                            checks.append(f"{tag}: {len(times)} acknowledged appends, {stored} stored")
                        p50 = statistics.median(times)
                        cpu_ms = cpu * 1000 / max(1, len(times))
                        rows.setdefault((shape, path), []).append(
                            (rate, p50, pct(times, 0.99), max(times), failed, cpu_ms)
                        )
                        print(
                            f"round {r} {shape:8} {path:20} {rate:6.0f}/s p50 {p50:7.2f} ms "
                            f"p99 {pct(times, 0.99):8.2f} ms max {max(times):8.2f} ms failed {failed} "
                            f"CPU {cpu_ms:.2f} ms/append",
                            flush=True,
                        )
        finally:
            remote.close()
            unbatched.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            local.close()

    def med(shape: str, path: str, i: int) -> float:
        return statistics.median(x[i] for x in rows[(shape, path)])

    table = [
        "| documents | path | appends/s | p50 ms | p99 ms | max ms | p99/p50 | rate vs in-process | failed "
        "| CPU ms/append |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for shape in ("distinct", "shared"):
        base = med(shape, "in-process", 0)
        for path in ("in-process", "service", "service, batch_max=1"):
            rate, p50, p99, mx = (med(shape, path, i) for i in range(4))
            failed = sum(x[4] for x in rows[(shape, path)])
            table.append(
                f"| {shape} | {path} | {rate:.0f} | {p50:.2f} | {p99:.2f} | {mx:.1f} | {p99 / p50:.1f}x | "
                f"{rate / base:.2f}x | {failed} | {med(shape, path, 5):.2f} |"
            )
            verdicts.append(
                f"{shape}, {path}: p99/p50 {p99 / p50:.1f}x ({'met' if p99 <= 10 * p50 else 'NOT met'})"
                + (
                    f"; rate {rate / base:.2f}x in-process ({'met' if rate >= 0.8 * base else 'NOT met'})"
                    if path.startswith("service")
                    else ""
                )
            )
    report = "\n".join(
        [
            "# sqlite: concurrent writers, in process and through `memvault serve`",
            "",
            f"Machine: {os.cpu_count()} cores ({platform.machine()}, shared with other jobs), Python "
            f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}. Load average at the end: "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}.",
            f"{args.threads} threads appending for {args.seconds:g} s (after {args.warmup:g} s of warm-up) per run; "
            f"{args.rounds} rounds, in-process and service runs alternating; medians over the rounds. "
            "Default settings (`synchronous = full`, builtin scanner); the service is one `memvault serve` process "
            "on loopback, the client one shared `http-remote` vault (default `batch_max`, and `batch_max = 1`: "
            "every retain alone, the service before batching). CPU ms/append: this process's CPU plus "
            "the server's (service runs), per acknowledged append, both sides on the same 2 cores.",
            "",
            *table,
            "",
            "Targets (issue 18, target 3): " + "; ".join(verdicts) + ".",
            "",
            "Every acknowledged append was found in the database afterwards (read by a separate connection)."
            if not checks
            else "LOST WRITES: " + "; ".join(checks),
            "",
            *(
                ["Failures seen (one example each, with the first run that hit it):", ""]
                + [f"- `{tag}`: {message}" for message, tag in failures_seen.items()]
                + [""]
                if failures_seen
                else []
            ),
            "Reproduce: `python bench/sqlite_writers_bench.py` (with `./core`, `./plugins/sqlite` and "
            "`./plugins/http-remote` installed).",
            "",
        ]
    )
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    if checks:
        sys.exit(1)


if __name__ == "__main__":
    main()
