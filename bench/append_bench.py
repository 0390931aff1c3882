"""Appending to one growing document on the memory provider: the cost per append by document length.

Each round appends 250 LoCoMo turns, one per retain, to one daily document
(near its 30,000-byte cap at the end) with the scanner off, for two contenders in the same
process, alternating which goes first:

- ``incremental``: the provider as shipped (``memvault.search.index_appended``
  tokenises only the appended text);
- ``whole``: the same provider re-indexing the whole body on every append
  (``index_document`` in place of ``index_appended``: what it did before).

Reports the median append time by the document's length in lines, medians over
rounds, and the ratio of the two.

    python bench/append_bench.py [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import memvault
import memvault.search

sys.path.insert(0, str(Path(__file__).parent))
import sqlite_locomo as locomo

APPENDS = 250
BUCKETS = ((1, 50), (101, 150), (201, 250))


def turns() -> list[str]:
    lines: list[str] = []
    for sample in locomo.load(locomo.DATASET):
        conv = sample["conversation"]
        for key in sorted(conv, key=lambda k: (len(k), k)):
            if key.startswith("session_") and isinstance(conv[key], list):
                lines.extend(locomo.turn_line(t) for t in conv[key])
    # Short enough turns that all of them fit the daily tier's 30,000-byte cap.
    return [line for line in lines if len(line.encode()) < 110][:APPENDS]


def one_round(lines: list[str], whole: bool) -> list[float]:
    """Seconds per append, in order (the n-th append leaves an n-line document)."""
    incremental = memvault.search.index_appended
    if whole:
        memvault.search.index_appended = lambda previous, stored, body: memvault.search.index_document(
            previous.source, body
        )
    try:
        times = []
        with memvault.open("memory", scanner="off") as vault:
            for line in lines:
                request = memvault.RetainRequest(
                    workspace_id="w", agent_id="a", tier="daily", key="2024-01-01", content=line + "\n", mode="append"
                )
                start = time.perf_counter()
                vault.retain(request)
                times.append(time.perf_counter() - start)
        return times
    finally:
        memvault.search.index_appended = incremental


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write a Markdown report here")
    args = parser.parse_args()
    lines = turns()
    size = len("".join(line + "\n" for line in lines).encode())
    runs: dict[str, list[list[float]]] = {"incremental": [], "whole": []}
    for round_no in range(args.rounds):
        order = ["incremental", "whole"] if round_no % 2 == 0 else ["whole", "incremental"]
        for name in order:
            runs[name].append(one_round(lines, whole=name == "whole"))
    rows = [
        "| document length (lines) | incremental p50 | whole re-index p50 (before) | ratio |",
        "|---|---|---|---|",
    ]
    for low, high in BUCKETS:
        p50 = {
            name: statistics.median(statistics.median(r[low - 1 : high]) for r in rounds)
            for name, rounds in runs.items()
        }
        rows.append(
            f"| {low}-{high} | {p50['incremental'] * 1e6:.0f} us | {p50['whole'] * 1e6:.0f} us | "
            f"{p50['whole'] / p50['incremental']:.1f}x |"
        )
    report = (
        f"{APPENDS} LoCoMo turns appended one per retain to one daily document ({size:,} bytes at the end), "
        f"memory provider, scanner off, {args.rounds} rounds alternating the contenders (medians over rounds); "
        f"Python {sys.version.split()[0]}.\n\n" + "\n".join(rows) + "\n"
    )
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
