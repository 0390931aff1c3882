"""Lifecycle overhead: a turn start vs the raw recall it makes, and notes saves, per provider.

For each provider (memory, and sqlite / local-disk when installed), one slot's
partition holds 1,000 lines. Timed, interleaved in rounds so machine noise hits
all equally:

* ``recall``   — the raw ``vault.recall`` a turn start makes (the baseline);
* ``turn``     — ``session.turn_started`` with that one slot (scope key,
  lock, recall hook, validation, commit, tool binding);
* ``turn+notes`` — the same with a second, notes slot holding 20 notes;
* ``notes.save`` — one ``NotesStore.save`` (append-log write + two log reads).

Reports p50 / p95 per call in milliseconds and the p50 ratios against ``recall``.

    python bench/lifecycle_bench.py [--rounds 15] [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corpus import WORDS, build

import memvault
from memvault.default_lifecycle.notes import NotesStore
from memvault.lifecycle import Runtime, Slot, by_principal, scope_key
from memvault.registry import get_registry

QUERY = "charlie delta echo"


def timed(fn: Callable[[], object], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def bench(name: str, settings: dict[str, object], rounds: int, calls: int, lines: int) -> None:
    vault = memvault.open(name, scanner="off", **settings)
    try:
        build(vault, lines, agent_id=scope_key("profile", None, "dana"))
        profile = Slot(name="profile", description="p", vault=vault, scope=by_principal, recall_limit=5)
        notes = Slot(name="notes", description="n", vault=vault, scope=by_principal, kind="notes")
        one = Runtime([profile], workspace_id="bench")
        two = Runtime([profile, notes], workspace_id="bench")
        store = NotesStore(vault, workspace_id="bench", agent_id=scope_key("notes", None, "dana"))
        for n in range(20):
            store.save(f"note number {n} about {WORDS[n % len(WORDS)]}")
        extra = NotesStore(vault, workspace_id="bench", agent_id="bench-notes")
        request = memvault.RecallRequest(
            workspace_id="bench", agent_id=scope_key("profile", None, "dana"), query=QUERY, limit=5
        )
        counter = iter(range(10**9))

        def turn(runtime: Runtime) -> Callable[[], object]:
            def run() -> object:
                return runtime.session(f"s{next(counter)}", principal="dana").turn_started(1, QUERY)

            return run

        cases: dict[str, Callable[[], object]] = {
            "recall": lambda: vault.recall(request),
            "turn": turn(one),
            "turn+notes": turn(two),
            "notes.save": lambda: extra.save(f"entry {next(counter)}"),
        }
        samples: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(rounds):
            for key, fn in cases.items():
                if key == "notes.save" and len(samples[key]) >= 30:
                    continue  # keep the notes log (and its reads) bounded
                samples[key].extend(timed(fn, calls if key != "notes.save" else 2))
        base = pct(samples["recall"], 0.5)
        print(f"\n{name}")
        print("| case | p50 ms | p95 ms | p50 / recall |\n|---|---|---|---|")
        for key, values in samples.items():
            print(f"| {key} | {pct(values, 0.5):.3f} | {pct(values, 0.95):.3f} | {pct(values, 0.5) / base:.2f} |")
        print(f"(median recall {statistics.median(samples['recall']) * 1000:.3f} ms, {len(samples['recall'])} samples)")
    finally:
        vault.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--lines", type=int, default=1000)
    args = parser.parse_args()
    installed = get_registry().names()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("memory", "sqlite", "local-disk"):
            if name not in installed:
                print(f"\n{name}: not installed, skipped")
                continue
            info = get_registry().get(name)
            (Path(tmp) / name).mkdir()
            settings = dict(info.scratch(Path(tmp) / name)) if info.scratch else {}
            bench(name, settings, args.rounds, args.calls, args.lines)


if __name__ == "__main__":
    main()
