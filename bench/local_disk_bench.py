"""local-disk recall over a year of daily notes, warm and cold, against `grep -riF --include=*.md` in the same run.

One agent with 365 daily documents of about 27 KB each (about 10 MB; the daily
cap is 30,000 bytes), written through the provider. Then, for each query:

* warm: the same provider instance, recall repeated (its per-file index cache is hot);
  baseline `grep -riF --include=*.md <phrase> <agent folder>` repeated (page cache hot);
* cold: before each sample the page cache is dropped (`echo 3 > /proc/sys/vm/drop_caches`,
  when this process may write it) and a NEW provider instance answers one recall;
  the grep baseline is also run right after a drop. When dropping is not possible the
  cold figures are "new instance only" and the report says so.

Reports p50 / p95 and the ratio of p50s (targets from issue 4: warm within 2x of
grep, cold within 10x).

    python bench/local_disk_bench.py [--warm 30] [--cold 5] [--out bench/results/local-disk.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import memvault

DAYS = 365
TARGET_BYTES = 27_000
QUERIES = [
    ("phrase", "metric units", "metric units"),
    ("question", "What units does she prefer?", "units"),
    ("rare term", "kubernetes", "kubernetes"),
]
_SENTENCES = [
    "Prefers metric units in every report.",
    "Standup moved to 9:30 because of the time zone change.",
    "Deployed the billing service; kubernetes rollout took twelve minutes.",
    "Lunch with Carol: she wants the roadmap before Friday.",
    "Budget review postponed; finance needs the quarterly numbers.",
    "Reminder: renew the TLS certificate for the staging cluster.",
]


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "etaoinshrdlcumwfgypbvk"
    return ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(6000)]


def build(root: Path) -> Path:
    """Write the year through the provider; return the agent's folder."""
    rng = random.Random(2026)
    vocab = _vocabulary(rng)
    start = time.perf_counter()
    with memvault.open("local-disk", root=str(root), scanner="off") as vault:
        for day in range(DAYS):
            date = (dt.date(2025, 1, 1) + dt.timedelta(days=day)).isoformat()
            lines: list[str] = []
            size = 0
            while size < TARGET_BYTES:
                if rng.random() < 0.02:
                    line = f"- {rng.choice(_SENTENCES)}\n"
                else:
                    line = "- " + " ".join(rng.choices(vocab, k=rng.randint(6, 18))) + "\n"
                lines.append(line)
                size += len(line)
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="bench",
                    agent_id="agent",
                    tier="daily",
                    key=date,
                    content="".join(lines),
                    mode="replace",
                )
            )
    folder = root / "bench" / "agents" / "agent"
    files = list((folder / "daily").glob("*.md"))
    total = sum(f.stat().st_size for f in files)
    print(f"built {len(files)} daily files, {total / 1e6:.2f} MB, in {time.perf_counter() - start:.1f} s")
    return folder


def drop_caches() -> bool:
    """Drop the page cache if this process may; ``False`` when it may not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def grep(pattern: str, folder: Path) -> None:
    # --include: read exactly the documents, not the empty lock sentinels beside them
    subprocess.run(["grep", "-riF", "--include=*.md", pattern, str(folder)], stdout=subprocess.DEVNULL, check=False)


START = "<!-- local_disk_bench:start -->"
END = "<!-- local_disk_bench:end -->"


def write_table(out: Path, table: str) -> None:
    """Replace the marked table block in ``out`` (keeping the notes around it), or write it."""
    text = out.read_text() if out.exists() else ""
    if START in text and END in text:
        before, _, rest = text.partition(START)
        _, _, after = rest.partition(END + "\n")
        out.write_text(before + table + after)
    else:
        out.write_text(table)


def many_files(root: Path, n: int = 3000, samples: int = 30) -> tuple[float, float]:
    """Warm recall over ``n`` small daily documents (years of one-line notes) against grep, interleaved.

    Every recall checks every file of the folder for edits (one ``stat`` each), so
    its cost follows the number of files; this measures that per-file overhead.
    """
    with memvault.open("local-disk", root=str(root), scanner="off") as vault:
        day = dt.date(2015, 1, 1)
        for d in range(n):
            key = (day + dt.timedelta(days=d)).isoformat()
            content = f"Speaker: day {d} note topic{d % 97} and the garden\n"
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="bench", agent_id="many", tier="daily", key=key, content=content, mode="append"
                )
            )
        time.sleep(2.5)  # past the racy window, as old notes are
        request = memvault.RecallRequest(workspace_id="bench", agent_id="many", query="topic42")
        vault.recall(request)
        folder = next(root.rglob("daily"))
        mine: list[float] = []
        base: list[float] = []
        for _ in range(samples):
            mine.append(timed(lambda: vault.recall(request)))
            base.append(timed(lambda: grep("topic42", folder)))
    return statistics.median(mine), statistics.median(base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm", type=int, default=30, help="warm samples per query")
    parser.add_argument("--cold", type=int, default=5, help="cold samples per query")
    parser.add_argument("--out", type=Path, default=None, help="write a markdown report here")
    args = parser.parse_args()
    if shutil.which("grep") is None:
        sys.exit("grep is required for the baseline")

    tmp = Path(tempfile.mkdtemp(prefix="memvault-local-disk-bench-"))
    try:
        folder = build(tmp / "memory")
        # A year of notes is old: let the files age past the provider's "racy" window (files changed
        # under 2 s ago are re-read on every recall), as all but today's file would be in real use.
        time.sleep(2.5)
        can_drop = drop_caches()
        cold_mode = "page cache dropped + new provider instance" if can_drop else "new provider instance only"
        print(f"cold mode: {cold_mode}")
        rows: list[str] = []
        for kind, query, pattern in QUERIES:
            request = memvault.RecallRequest(workspace_id="bench", agent_id="agent", query=query)
            vault = memvault.open("local-disk", root=str(tmp / "memory"), scanner="off")
            hits = len(vault.recall(request).hits)  # warms this instance's cache
            warm_recall: list[float] = []
            warm_grep: list[float] = []
            for _ in range(args.warm):  # interleaved, so load on the shared machine hits both alike
                warm_recall.append(timed(lambda: vault.recall(request)))  # noqa: B023
                warm_grep.append(timed(lambda: grep(pattern, folder)))  # noqa: B023
            vault.close()
            cold_recall: list[float] = []
            cold_grep: list[float] = []
            for _ in range(args.cold):
                drop_caches()
                fresh = memvault.open("local-disk", root=str(tmp / "memory"), scanner="off")
                cold_recall.append(timed(lambda: fresh.recall(request)))  # noqa: B023
                fresh.close()
                drop_caches()
                cold_grep.append(timed(lambda: grep(pattern, folder)))  # noqa: B023
            for mode, mine, base in (("warm", warm_recall, warm_grep), ("cold", cold_recall, cold_grep)):
                ratio = statistics.median(mine) / statistics.median(base)
                row = (
                    f"| {kind}: `{query}` | {mode} | {hits} | {p(mine, 0.5) * 1e3:.1f} | {p(mine, 0.95) * 1e3:.1f} "
                    f"| `{pattern}` | {p(base, 0.5) * 1e3:.1f} | {p(base, 0.95) * 1e3:.1f} | {ratio:.1f}x |"
                )
                rows.append(row)
                print(row)
        if args.out:
            table = (
                f"{START}\ncold mode: **{cold_mode}**; {args.warm} warm and {args.cold} cold samples per query; "
                f"python {platform.python_version()}, {os.cpu_count()} cores, load average "
                f"{os.getloadavg()[0]:.1f} at the end\n\n"
                "| query | mode | hits | recall p50 ms | recall p95 ms | grep -riF | grep p50 ms | grep p95 ms "
                "| p50 ratio |\n|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + f"\n{END}\n"
            )
            write_table(args.out, table)
        mine, base = many_files(tmp / "many")
        print(
            f"3,000 one-line daily documents, warm: recall p50 {mine * 1e3:.1f} ms, grep -riF p50 {base * 1e3:.1f} ms, "
            f"ratio {mine / base:.1f}x"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
