"""What the tracing instrumentation costs when tracing is off (#37).

The same recall and retain, on one vault, called two ways in alternation:

- ``instrumented``: ``vault.recall(...)``, through :func:`memvault.telemetry.traced`'s
  wrapper with no tracer provider configured (the shipped path);
- ``bypassed``: ``Vault.recall.__wrapped__(vault, ...)``, the undecorated method.

Two states of "off", one after the other: OpenTelemetry installed but never imported by the
application (memvault does not import it), then ``opentelemetry.trace`` imported with no
provider set (the global proxy provider: one more call and an ``isinstance`` per verb).

The two contenders are interleaved call by call (which goes first alternating), ``ROUNDS x
CALLS`` calls each; the report gives each one's median per call and the ratio instrumented /
bypassed, all from the same run. A no-op method decorated the same way shows the wrapper's own
cost in nanoseconds (best of ``ROUNDS`` loops of 100,000 calls). The memory provider with the scanner off is
the worst case for the ratio (the cheapest verbs); sqlite shows a store that writes to disk.

    python bench/telemetry_bench.py [--rounds 15] [--calls 400] [--providers memory,sqlite]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import memvault
from memvault import telemetry
from memvault.vault import Vault


def _measure(vault: Vault, rounds: int, calls: int) -> dict[str, tuple[float, float]]:
    recall_request = memvault.RecallRequest(workspace_id="w", agent_id="a", query="metric units")
    replace = memvault.RetainRequest(
        workspace_id="w", agent_id="a", tier="AGENT", key="bench", content="Prefers metric units.", mode="replace"
    )
    recall_raw = Vault.recall.__wrapped__  # type: ignore[attr-defined]
    retain_raw = Vault.retain.__wrapped__  # type: ignore[attr-defined]
    contenders: dict[str, dict[str, Callable[[], object]]] = {
        "recall": {
            "instrumented": lambda: vault.recall(recall_request),
            "bypassed": lambda: recall_raw(vault, recall_request),
        },
        "retain": {
            "instrumented": lambda: vault.retain(replace),
            "bypassed": lambda: retain_raw(vault, replace),
        },
    }
    results: dict[str, tuple[float, float]] = {}
    for verb, pair in contenders.items():
        samples: dict[str, list[float]] = {"instrumented": [], "bypassed": []}
        for index in range(rounds * calls):
            # Interleaved call by call (which goes first alternating), so the machine's load drifts
            # over both alike; medians of all the calls.
            order = ("instrumented", "bypassed") if index % 2 == 0 else ("bypassed", "instrumented")
            for name in order:
                started = time.perf_counter_ns()
                pair[name]()
                samples[name].append((time.perf_counter_ns() - started) / 1000.0)
        results[verb] = (statistics.median(samples["instrumented"]), statistics.median(samples["bypassed"]))
    return results


class _Null:
    """A method doing nothing, decorated like the verbs: what the wrapper alone costs."""

    name = "null"

    @telemetry.traced("recall")
    def recall(self, request: object) -> object:
        return request


def _wrapper_ns(rounds: int) -> tuple[float, float]:
    """Per call, ns: the decorated no-op and the bare one (best of ``rounds`` loops of 100,000 each)."""
    null = _Null()
    bare = _Null.recall.__wrapped__  # type: ignore[attr-defined]
    loops = 100_000
    best = {"instrumented": float("inf"), "bypassed": float("inf")}
    for _ in range(loops):  # warm-up: the interpreter specialises both paths first
        null.recall(None)
        bare(null, None)
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for _ in range(loops):
            null.recall(None)
        best["instrumented"] = min(best["instrumented"], (time.perf_counter_ns() - started) / loops)
        started = time.perf_counter_ns()
        for _ in range(loops):
            bare(null, None)
        best["bypassed"] = min(best["bypassed"], (time.perf_counter_ns() - started) / loops)
    return best["instrumented"], best["bypassed"]


def _seed(vault: Vault) -> None:
    for index in range(200):
        vault.retain(
            memvault.RetainRequest(
                workspace_id="w",
                agent_id="a",
                tier="daily",
                key="2026-01-02",
                content=f"Line {index}: metric units and more.\n",
                mode="append",
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--providers", default="memory,sqlite")
    args = parser.parse_args()
    os.environ["MEMVAULT_EMBEDDER"] = "off"
    assert telemetry.AVAILABLE, "install the extra: pip install 'memvault[otel]'"
    with tempfile.TemporaryDirectory() as scratch:
        vaults = []
        for name in args.providers.split(","):
            settings = {"path": str(Path(scratch) / "bench.db")} if name == "sqlite" else {}
            vault = memvault.open(name, scanner="off", **settings)
            _seed(vault)
            vaults.append(vault)
        print(f"{'state':<34} {'provider':<8} {'verb':<7} {'instrumented':>13} {'bypassed':>10} {'ratio':>7}")
        for state in ("otel installed, not imported", "otel imported, no provider"):
            if state.startswith("otel imported"):
                import opentelemetry.trace  # noqa: F401 - the state measured: imported, nothing set

            assert not telemetry.tracing()
            traced_ns, bare_ns = _wrapper_ns(args.rounds)
            print(
                f"{state:<34} {'-':<8} {'no-op':<7} {traced_ns:>10.0f} ns {bare_ns:>7.0f} ns "
                f"+{traced_ns - bare_ns:.0f} ns"
            )
            for vault in vaults:
                for verb, (traced, bypassed) in _measure(vault, args.rounds, args.calls).items():
                    print(
                        f"{state:<34} {vault.name:<8} {verb:<7} {traced:>10.2f} us {bypassed:>7.2f} us "
                        f"{traced / bypassed:>7.3f}"
                    )
        for vault in vaults:
            vault.close()


if __name__ == "__main__":
    main()
