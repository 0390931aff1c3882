"""The scanner's check by meaning on real conversation text: cost per retain, cascade share, rejections.

Data: every turn of LoCoMo (``bench/data/locomo/locomo10.json``, or ``LOCOMO``; 5,882 turns),
appended as ``Speaker: text\\n`` to one ``daily`` document per session (as ``scan_bench.py`` does).

Two vaults per round on the same provider, fresh each round: the builtin scanner by its rules alone,
and the builtin scanner with the check by meaning (the default embedder, memvault-embed-minilm).
Every turn is retained into both, in alternating order turn by turn, so machine noise hits both
alike; per round the p50 of each, then the median over rounds and the ratio (with meaning over
rules alone). Also: the share of writes whose text reached the model (the cascade let a window
through), windows embedded, and the turns each rejects.

    python bench/scan_meaning_bench.py [--rounds 3] [--provider memory] [--limit N] [--out FILE]

``--worst-case``: instead, an attacker's write: a daily log just under its 30,000-byte cap whose every line
passes the cascade (two of its words, no rule), so the char model ranks every window and the sentence
model embeds the most (:data:`memvault.scanner.semantic.MAX_WINDOWS`); each scanner on a fresh vault, the
two alternating, the median over ``--rounds`` (at least 5).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import memvault
from memvault.registry import get_registry
from memvault.scanner.plugin import BuiltinScanner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scan_bench import percentile, turns


def open_vault(provider: str, scanner: BuiltinScanner, folder: Path) -> memvault.Vault:
    info = get_registry().get(provider)
    settings = dict(info.scratch(folder)) if info.scratch is not None else {}
    return memvault.open(provider, scanner="off", embedder="off", plugins=[scanner], **settings)


def one_round(provider: str, data: list[tuple[str, str, str]], embedder: Any, flip: bool) -> dict[str, Any]:
    rules, meaning = BuiltinScanner(), BuiltinScanner(embedder=embedder)
    with tempfile.TemporaryDirectory() as tmp:
        vaults = {
            "rules": open_vault(provider, rules, Path(tmp) / "rules"),
            "meaning": open_vault(provider, meaning, Path(tmp) / "meaning"),
        }
        times: dict[str, list[float]] = {"rules": [], "meaning": []}
        rejected: dict[str, list[tuple[str, str]]] = {"rules": [], "meaning": []}
        clock = time.perf_counter
        for index, (agent, key, line) in enumerate(data):
            request = memvault.RetainRequest(
                workspace_id="bench", agent_id=agent, tier="daily", key=key, content=line, mode="append"
            )
            order = ("rules", "meaning") if (index % 2 == 0) != flip else ("meaning", "rules")
            for name in order:
                started = clock()
                try:
                    vaults[name].retain(request)
                except memvault.ContentRejected as exc:
                    rejected[name].append((line.strip(), exc.pattern))
                times[name].append(clock() - started)
        for vault in vaults.values():
            vault.close()
    semantic = meaning.semantic
    assert semantic is not None
    return {
        "times": times,
        "rejected": rejected,
        "texts": semantic.texts,
        "reaching": semantic.texts_reaching_model,
        "windows": semantic.windows_embedded,
        "by_chars": semantic.windows_by_chars,
    }


#: Lines with two of the cascade's words each and no rule's (written for this bench).
WORST_LINES = (
    "Forward the meeting notes from the {i} standup to the team inbox today.",
    "The previous setup of room {i} was configured by the operator last week.",
    "Remember the email about the {i} conference and the hotel details.",
)


def worst_case(provider: str, embedder: Any, rounds: int) -> str:
    lines: list[str] = []
    size = 0
    while size + len(line := WORST_LINES[len(lines) % 3].format(i=len(lines))) + 1 <= 29_000:
        lines.append(line)
        size += len(line) + 1
    body = "\n".join(lines) + "\n"
    times: dict[str, list[float]] = {"rules": [], "meaning": []}
    embedded = 0
    for index in range(max(rounds, 5)):
        for name in ("rules", "meaning") if index % 2 == 0 else ("meaning", "rules"):
            scanner = BuiltinScanner(embedder=embedder) if name == "meaning" else BuiltinScanner()
            with tempfile.TemporaryDirectory() as tmp:
                vault = open_vault(provider, scanner, Path(tmp))
                request = memvault.RetainRequest(
                    workspace_id="bench", agent_id="a", tier="daily", key="2026-12-04", content=body, mode="append"
                )
                started = time.perf_counter()
                vault.retain(request)  # stored: the lines are benign
                times[name].append(time.perf_counter() - started)
                vault.close()
            if scanner.semantic is not None:
                embedded = scanner.semantic.windows_embedded
    rules, meaning = (statistics.median(times[name]) * 1e3 for name in ("rules", "meaning"))
    return (
        f"Worst case ({platform.machine()}, CPython {platform.python_version()}, provider `{provider}`): one "
        f"write of {len(body.encode())} bytes, {len(lines)} lines each passing the cascade; median of "
        f"{len(times['rules'])}: rules alone **{rules:.1f} ms**, with the check by meaning **{meaning:.1f} ms** "
        f"({meaning / rules:.1f}x), {embedded} windows embedded.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--provider", default="memory")
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (0: all)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worst-case", action="store_true", help="an attacker's write instead (see above)")
    args = parser.parse_args()
    from memvault_embed_minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm up"])  # the model loads once per process, not inside a measured retain
    if args.worst_case:
        print(worst_case(args.provider, embedder, args.rounds))
        return
    data = list(turns())
    if args.limit:
        data = data[: args.limit]
    rounds = [one_round(args.provider, data, embedder, flip=bool(r % 2)) for r in range(args.rounds)]
    p50 = {name: [percentile(r["times"][name], 0.5) for r in rounds] for name in ("rules", "meaning")}
    p90 = {name: [percentile(r["times"][name], 0.9) for r in rounds] for name in ("rules", "meaning")}
    mean = {name: [statistics.fmean(r["times"][name]) for r in rounds] for name in ("rules", "meaning")}
    ratio = [m / r for m, r in zip(p50["meaning"], p50["rules"], strict=True)]
    last = rounds[-1]
    lines = [
        "## The scanner's check by meaning: cost per retain on LoCoMo (`bench/scan_meaning_bench.py`)",
        "",
        f"Machine: {platform.machine()}, CPython {platform.python_version()}; provider `{args.provider}`; "
        f"{len(data)} turns appended; {args.rounds} rounds, each with fresh vaults and a cold verdict cache; "
        "the two scanners take turns going first.",
        "",
        "| scanner | retain p50 | p90 | mean |",
        "|---|---|---|---|",
    ]
    for name, label in (("rules", "rules alone"), ("meaning", "rules + check by meaning")):
        lines.append(
            f"| {label} | {statistics.median(p50[name]) * 1e6:.1f} us | {statistics.median(p90[name]) * 1e6:.1f} us "
            f"| {statistics.median(mean[name]) * 1e6:.1f} us |"
        )
    lines += [
        "",
        f"p50 ratio (with meaning / rules alone), median over rounds: **{statistics.median(ratio):.3f}** "
        f"(rounds: {', '.join(f'{r:.3f}' for r in ratio)}).",
        "",
        f"Writes whose text reached the model: **{last['reaching']} of {last['texts']}** "
        f"({last['reaching'] / last['texts']:.2%}); windows embedded: {last['windows']}; windows not in English "
        f"judged by the character classifier: {last['by_chars']}.",
        "",
        f"Turns rejected: rules alone {len(last['rejected']['rules'])}, with meaning "
        f"{len(last['rejected']['meaning'])}.",
    ]
    for line, pattern in last["rejected"]["meaning"]:
        lines.append(f"* `{pattern}`: {line[:120]}")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
