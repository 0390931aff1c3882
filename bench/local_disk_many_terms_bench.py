"""local-disk against sqlite on the same store and the same queries of 3, 64 and 128 terms, in one run.

One agent with 336 daily documents of about 27 KB each (about 9 MB), the same
bodies written through both providers (#33: "every document freshly changed",
128 terms took 7.6 s on local-disk and 0.17 s on sqlite). For each query:

* local-disk fresh: every file's last line is rewritten before each sample, so the
  recall reads and indexes every document again, as right after a write to each;
* local-disk again: the same recall right after, the files unchanged but still within
  the racy window (read again and found identical by digest, so their index is kept);
* local-disk warm: the same instance again, files unchanged and aged;
* sqlite: the same query on the same bodies.

Samples are interleaved, so load on a shared machine hits all three alike; the
report gives p50s and the ratios to sqlite (target: fresh within 10x).

    python bench/local_disk_many_terms_bench.py [--samples 5] [--out bench/results/local-disk-many-terms.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import memvault

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_disk_bench import TARGET_BYTES, _vocabulary, timed

DAYS = 336
TERMS = (3, 64, 128)


def _bodies() -> list[tuple[str, str]]:
    """(date, body) of every daily document: the local_disk_bench generator, 336 days."""
    rng = random.Random(2026)
    vocab = _vocabulary(rng)
    out = []
    for day in range(DAYS):
        lines: list[str] = []
        size = 0
        while size < TARGET_BYTES:
            line = "- " + " ".join(rng.choices(vocab, k=rng.randint(6, 18))) + "\n"
            lines.append(line)
            size += len(line)
        out.append(((dt.date(2025, 1, 1) + dt.timedelta(days=day)).isoformat(), "".join(lines)))
    return out


def _fill(vault: memvault.Vault, bodies: list[tuple[str, str]]) -> None:
    for date, body in bodies:
        vault.retain(
            memvault.RetainRequest(
                workspace_id="bench", agent_id="agent", tier="daily", key=date, content=body, mode="replace"
            )
        )


def _change(folder: Path, sample: int) -> None:
    """Change every document as an editor would (a new last line), outside the timed region."""
    for path in folder.glob("*.md"):
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:-1]) + f"- edited in sample {sample}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=5, help="samples per query and side")
    parser.add_argument("--out", type=Path, default=None, help="write a markdown report here")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="memvault-many-terms-bench-"))
    try:
        bodies = _bodies()
        local = memvault.open("local-disk", root=str(tmp / "memory"), scanner="off")
        sqlite = memvault.open("sqlite", path=str(tmp / "memory.db"), scanner="off")
        _fill(local, bodies)
        _fill(sqlite, bodies)
        folder = tmp / "memory" / "bench" / "agents" / "agent" / "daily"
        size = sum(p.stat().st_size for p in folder.glob("*.md"))
        vocab = _vocabulary(random.Random(2026))
        rows = []
        for n in TERMS:
            query = " ".join(random.Random(n).sample(vocab, n))
            request = memvault.RecallRequest(workspace_id="bench", agent_id="agent", query=query)
            same = [(h.source, h.line) for h in local.recall(request).hits] == [
                (h.source, h.line) for h in sqlite.recall(request).hits
            ]
            fresh: list[float] = []
            warm: list[float] = []
            base: list[float] = []
            again: list[float] = []
            for sample in range(args.samples):
                _change(folder, sample)
                fresh.append(timed(lambda: local.recall(request)))  # noqa: B023
                again.append(timed(lambda: local.recall(request)))  # noqa: B023
                base.append(timed(lambda: sqlite.recall(request)))  # noqa: B023
            time.sleep(2.1)  # past the racy window: the next recall caches every document
            local.recall(request)
            for _ in range(args.samples):
                warm.append(timed(lambda: local.recall(request)))  # noqa: B023
            f, a, w, b = (statistics.median(v) for v in (fresh, again, warm, base))
            rows.append(
                f"| {n} | {f * 1000:.0f} | {a * 1000:.0f} | {w * 1000:.1f} | {b * 1000:.1f} | {f / b:.1f}x"
                f" | {a / b:.1f}x | {w / b:.2f}x | {'yes' if same else 'no'} |"
            )
            print(rows[-1], flush=True)
        local.close()
        sqlite.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = "\n".join(
        [
            f"{DAYS} daily documents, {size / 1e6:.1f} MB, one agent; p50 of {args.samples} interleaved samples "
            f"({platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}).",
            "",
            "| terms | local-disk fresh (ms) | again (ms) | warm (ms) | sqlite (ms) | fresh / sqlite"
            " | again / sqlite | warm / sqlite | same hits |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
        ]
    )
    print(table)
    if args.out is not None:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
