"""Facade overhead: a recall through `Vault` vs a direct call of the provider's method.

One agent partition of 1,000 lines in the `memory` provider; the same request is
timed both ways, interleaved in rounds so machine noise hits both equally.
Reports medians and their ratio (target from issue 2: under 1.10).

    python bench/facade_bench.py [--rounds 30] [--calls 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import memvault
from memvault.memory import MemoryProvider

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
]


def build(provider: memvault.Vault, lines: int) -> None:
    rng = random.Random(7)
    per_doc = 100
    for doc in range(lines // per_doc):
        body = "".join(" ".join(rng.choices(WORDS, k=12)) + f" item{doc}-{i}\n" for i in range(per_doc))
        provider.retain(
            memvault.RetainRequest(
                workspace_id="bench",
                agent_id="agent",
                tier="daily",
                key=f"2026-01-{doc + 1:02d}",
                content=body,
                mode="replace",
            )
        )


def per_call(fn: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=None, help="write a Markdown report here")
    args = parser.parse_args()

    vault = memvault.open("memory", scanner="off")
    build(vault, args.lines)
    provider = vault.provider
    assert isinstance(provider, MemoryProvider)
    request = memvault.RecallRequest(workspace_id="bench", agent_id="agent", query="charlie delta echo")
    assert len(vault.recall(request).hits) == 20

    direct: list[float] = []
    facade: list[float] = []
    for _ in range(args.rounds):
        direct.append(per_call(lambda: provider.memvault_recall(request), args.calls))
        facade.append(per_call(lambda: vault.recall(request), args.calls))
    d, f = statistics.median(direct), statistics.median(facade)
    report = "\n".join(
        [
            f"Partition of {args.lines} lines; {args.rounds} rounds x {args.calls} calls, interleaved.",
            "",
            "| path | median per recall |",
            "|---|---|",
            f"| direct call of `MemoryProvider.memvault_recall` | {d * 1e6:.1f} us |",
            f"| `Vault.recall` (validation check, pluggy, result check) | {f * 1e6:.1f} us |",
            f"| **ratio facade / direct** | **{f / d:.3f}** (target < 1.10; {(f - d) * 1e6:+.1f} us per call) |",
            "",
        ]
    )
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
