"""Recall with the scanner judging the hits together (issue 33): cost, and what it withholds on real text.

Data: LoCoMo (``bench/data/locomo/locomo10.json``, CC BY-NC 4.0, or ``--data``), stored as
``scan_bench.py`` stores it: each conversation is one agent, each session one ``daily``
document, each turn appended as ``Speaker: text``. The queries are LoCoMo's own questions
(1,986 over the 10 conversations), each asked in its conversation's partition.

Two scanners wrap the same provider instance: the builtin scanner of this tree and the one
at git ``--baseline REF`` (default ``HEAD``; before the joint check, pass the commit before
it). Measured, in one run:

1. what the joint check withholds: every question recalled through both; the hits must be
   the same (source, line, snippet, score) and nothing withheld (``quarantined`` empty);
2. recall p50 / p95 with each, over every question, interleaved over rounds, in CPU time of
   the calling thread (``time.thread_time``: every provider here works in that thread, and
   the other processes of a shared machine do not count). Each round
   gets fresh scanners whose per-document verdicts are filled first (each stored body
   judged once, as a long-running vault has them), so the joint verdict of a question is
   never cached: each question is asked once per scanner and round.

    python bench/recall_joint_bench.py [--rounds 3] [--providers memory,sqlite] [--limit 20]
        [--baseline REF] [--conversations N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scan_bench import DATA, load_baseline, percentile, turns

import memvault
from memvault.registry import get_registry
from memvault.scanner.plugin import BuiltinScanner


def questions(path: Path, conversations: int) -> list[tuple[str, str]]:
    """(agent id, question) for every question of the first ``conversations`` conversations."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        (f"conv-{index}", qa["question"]) for index, sample in enumerate(data[:conversations]) for qa in sample["qa"]
    ]


def fill(vault: memvault.Vault, path: Path, conversations: int) -> list[tuple[str, str]]:
    """Store every turn of the first ``conversations`` conversations; the (agent, daily key) documents."""
    documents: dict[tuple[str, str], None] = {}
    keep = {f"conv-{i}" for i in range(conversations)}
    for agent, key, line in turns(path):
        if agent in keep:
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="bench", agent_id=agent, tier="daily", key=key, content=line, mode="append"
                )
            )
            documents[(agent, key)] = None
    return list(documents)


def scanned(vault: memvault.Vault, scanner: Any, documents: list[tuple[str, str]]) -> memvault.Vault:
    """A vault on ``vault``'s provider with ``scanner``, every stored body's verdict already cached."""
    wrapped = memvault.Vault(vault.provider, name=vault.name, capabilities=vault.capabilities, plugins=[scanner])
    for agent, key in documents:
        body = vault.read(memvault.ReadRequest(workspace_id="bench", agent_id=agent, tier="daily", key=key)).content
        scanner.verdict(body)
    return wrapped


def recall(vault: memvault.Vault, asked: list[tuple[str, str]], limit: int) -> tuple[list[float], list[Any]]:
    times: list[float] = []
    results: list[Any] = []
    for agent, question in asked:
        request = memvault.RecallRequest(workspace_id="bench", agent_id=agent, query=question, limit=limit)
        started = time.thread_time()
        result = vault.recall(request)
        times.append(time.thread_time() - started)
        results.append(result)
    return times, results


def shape(result: Any) -> tuple[Any, ...]:
    return tuple((h.source, h.line, h.snippet, h.score) for h in result.hits), tuple(result.quarantined)


def measure(provider: str, path: Path, args: argparse.Namespace, before: type) -> dict[str, Any]:
    info = get_registry().get(provider)
    asked = questions(path, args.conversations)
    contenders: dict[str, type] = {"before": before, "after": BuiltinScanner}
    times: dict[str, list[list[float]]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory(prefix="recall-joint-") as tmp:
        settings = dict(info.scratch(Path(tmp))) if info.scratch is not None else {}
        with memvault.open(provider, scanner="off", **settings) as store:
            documents = fill(store, path, args.conversations)
            withheld = changed = 0
            for round_ in range(args.rounds):
                order = list(contenders) if round_ % 2 == 0 else list(contenders)[::-1]
                answers: dict[str, list[Any]] = {}
                for name in order:
                    vault = scanned(store, contenders[name](), documents)
                    spent, answers[name] = recall(vault, asked, args.limit)
                    times[name].append(spent)
                    print(
                        f"  {provider} round {round_ + 1} {name:6}: "
                        f"recall p50 {statistics.median(spent) * 1e6:8.1f} us",
                        file=sys.stderr,
                    )
                if round_ == 0:
                    withheld = sum(bool(r.quarantined) for r in answers["after"])
                    changed = sum(
                        shape(a) != shape(b) for a, b in zip(answers["before"], answers["after"], strict=True)
                    )
    p50 = {name: statistics.median(statistics.median(r) for r in rounds) for name, rounds in times.items()}
    p95 = {name: statistics.median(percentile(r, 0.95) for r in rounds) for name, rounds in times.items()}
    return {
        "provider": provider,
        "documents": len(documents),
        "questions": len(asked),
        "withheld": withheld,
        "changed": changed,
        "p50_before_us": p50["before"] * 1e6,
        "p50_after_us": p50["after"] * 1e6,
        "p95_before_us": p95["before"] * 1e6,
        "p95_after_us": p95["after"] * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--providers", default="memory,sqlite")
    parser.add_argument("--limit", type=int, default=20, help="hits asked per recall (default: the most, 20)")
    parser.add_argument("--conversations", type=int, default=10, help="the first N conversations (default: all)")
    parser.add_argument("--baseline", default="HEAD", help="the scanner of this git ref is 'before'")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    before = load_baseline(args.baseline)
    results = [measure(p, args.data, args, before) for p in args.providers.split(",") if p]
    lines = [
        f"Machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}; {args.rounds} interleaved rounds; limit {args.limit}; "
        f"before = the scanner at `{args.baseline}`.",
        "",
        "| provider | documents | questions | withheld | hits changed | recall p50 before | after | added "
        "| p95 before | after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['provider']} | {r['documents']} | {r['questions']} | {r['withheld']} | {r['changed']} | "
            f"{r['p50_before_us']:.1f} us | {r['p50_after_us']:.1f} us | "
            f"{r['p50_after_us'] - r['p50_before_us']:+.1f} us ({r['p50_after_us'] / r['p50_before_us'] - 1:+.1%}) | "
            f"{r['p95_before_us']:.1f} us | {r['p95_after_us']:.1f} us |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
