"""The scanner's own work per append on long documents, against the scanner at git REF, in the same rounds.

``bench/scan_bench.py`` appends LoCoMo's sessions, whose bodies stay around
1.5 KB (p50). Here ten daily documents are each grown by 180 LoCoMo turns
to about 23 KB (under the 30 KB daily cap), on the memory provider, and the
scanner's own p50 is taken over the appends to bodies of 11-23 KB: where
hashing the whole stored body on every append used to dominate.

    python bench/scan_long_docs.py [--baseline 0d0f05f] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

import scan_bench  # bench/ is on the path when this script runs

import memvault

PER_DOCUMENT = 180


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="0d0f05f", help="git ref of the scanner to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args()
    contenders = {"before": scan_bench.load_baseline(args.baseline), "after": scan_bench.TimedScanner}
    lines = [line for _agent, _key, line in scan_bench.turns()]
    data = []
    for doc in range(10):
        key = f"2023-02-{doc + 1:02d}"
        data += [("conv-0", key, line) for line in lines[doc * PER_DOCUMENT : (doc + 1) * PER_DOCUMENT]]
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, cls in contenders.items():
            scanner = cls()
            vault = memvault.open("memory", scanner="off", plugins=[scanner])
            scan_bench.retain_all(vault, data)
            late = [t for i, t in enumerate(scanner.spent) if i % PER_DOCUMENT >= PER_DOCUMENT // 2]
            results[name].append(statistics.median(late) * 1e6)
    print(f"scanner's own p50 per append to a body of 11-23 KB (memory provider, {args.rounds} rounds)")
    for name, values in results.items():
        rounds = ", ".join(f"{v:.1f}" for v in values)
        which = args.baseline if name == "before" else "this tree"
        print(f"  {name:6s} ({which}): {statistics.median(values):.1f} us  [{rounds}]")


if __name__ == "__main__":
    main()
