"""Run every benchmark in one go (`tox -e bench`); each prints its figures and its baseline.

Benchmarks that can write their Markdown report do so into bench/results/,
which docs/performance.md includes; the others' output is saved beside them
as bench/results/raw/<name>.txt. Pass names to run a subset:

    python bench/run.py facade scanner
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

BENCHES: dict[str, list[str]] = {
    "facade": ["facade_bench.py", "--out", str(RESULTS / "facade.md")],
    "append": ["append_bench.py", "--out", str(RESULTS / "append.md")],
    "sqlite": ["sqlite_bench.py"],
    "sqlite-writers": ["sqlite_writers_bench.py"],
    "local-disk": ["local_disk_bench.py", "--out", str(RESULTS / "local-disk.md")],
    "http-remote": ["http_bench.py", "--write"],
    "scanner": ["scan_bench.py", "--read-back", "--out", str(RESULTS / "scanner.md")],
    "lifecycle": ["lifecycle_bench.py"],
    "mcp": ["mcp_bench.py", "--write"],
    "postgres": ["postgres_bench.py", "--out", str(RESULTS / "postgres.md")],
    "ranking": ["ranking_bench.py", "--out", str(RESULTS / "ranking.md")],
}


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    (RESULTS / "raw").mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names or list(BENCHES):
        script, *args = BENCHES[name]
        print(f"\n=== {name}: python bench/{script} {' '.join(args)}", flush=True)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True, check=False)
        print(proc.stdout, end="")
        print(proc.stderr, end="", file=sys.stderr)
        (RESULTS / "raw" / f"{name}.txt").write_text(proc.stdout)
        print(f"=== {name}: exit {proc.returncode} in {time.perf_counter() - started:.0f} s", flush=True)
        if proc.returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
