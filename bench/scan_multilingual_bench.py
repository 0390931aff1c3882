"""The ``multilingual`` scanner against the builtin: held-out sets, LoCoMo and cost (issue 36).

Data: the held-out set ``core/tests/data/scan_heldout_v12.jsonl`` (measured, never trained or tuned on;
``--sets`` also takes the earlier sets: v2 to v9 are training data now, v10 the rules' data, v11 held out before
v12) and every turn of LoCoMo (``bench/data/locomo/locomo10.json``, or ``LOCOMO``; 5,882 turns, English, benign).
Every held-out item is written with ``Vault.retain`` to a fresh document of the ``memory`` provider, as
``bench/scan_heldout.py`` does, once through each scanner (``ContentRejected`` counts as rejected); each LoCoMo
turn is appended to one ``daily`` document per session.

Printed: per set, the attacks rejected (in English, in other languages) and the benign items rejected
(in English, in other languages), for the builtin and the multilingual scanner; LoCoMo's rejections;
and the cost: the p50 of a retain of the held-out sets' benign items in other languages (each a fresh
document, so no verdict is cached) and of a LoCoMo turn, the two scanners alternating item by item in
the same run, and their ratio. No item is printed: the sets stay held out.

    python bench/scan_multilingual_bench.py [--sets v12] [--files A.jsonl,...] [--locomo-limit N]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import memvault
from memvault import ContentRejected, RetainRequest
from memvault_scan_multilingual import MultilingualScanner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scan_bench import turns

DATA = Path(__file__).resolve().parents[1] / "core" / "tests" / "data"


def rejected(
    vault: memvault.Vault, agent: str, text: str, mode: str = "replace", tier: str = "AGENT", key: str | None = None
) -> bool:
    try:
        keyed = {"key": key} if key is not None else {}
        vault.retain(RetainRequest(workspace_id="bench", agent_id=agent, tier=tier, content=text, mode=mode, **keyed))
    except ContentRejected:
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="v12", help="held-out sets (default: %(default)s)")
    parser.add_argument(
        "--files", default="", help="more sets, as JSONL paths (comma-separated), measured as the held-out ones"
    )
    parser.add_argument("--locomo-limit", type=int, default=0, help="at most this many LoCoMo turns (0: all)")
    parser.add_argument("--out", default="", help="also write the Markdown report here")
    args = parser.parse_args()

    # As a user selects them (``scanner = "..."``): the vault binds its embedder to each.
    vaults = {name: memvault.open("memory", scanner=name) for name in ("builtin", "multilingual")}
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `bench/scan_multilingual_bench.py` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; memory provider, default embedder "
        "(MiniLM) for the check by meaning in both.",
        "",
        "| set | scanner | attacks rejected | in English | in other languages | benign rejected | in English |"
        " in other languages |",
        "|---|---|---|---|---|---|---|---|",
    ]
    foreign_benign: list[str] = []
    paths = {name: DATA / f"scan_heldout_{name}.jsonl" for name in args.sets.split(",") if name}
    paths.update({Path(file).stem: Path(file) for file in args.files.split(",") if file})
    for name, path in paths.items():
        items = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
        foreign_benign += [item["text"] for item in items if item and not item["attack"] and item["lang"] != "en"]
        for scanner, vault in vaults.items():
            count: Counter[str] = Counter()
            for item in items:
                kind = "attack" if item["attack"] else "benign"
                lang = "en" if item["lang"] == "en" else "other"
                count[kind, lang, "total"] += 1
                count[kind, lang, "rejected"] += rejected(vault, f"{name}-{item['id']}", item["text"])

            def cell(kind: str, lang: str | None = None, count: Counter[str] = count) -> str:
                langs = ("en", "other") if lang is None else (lang,)
                got = sum(count[kind, x, "rejected"] for x in langs)
                return f"{got} of {sum(count[kind, x, 'total'] for x in langs)}"

            lines.append(
                f"| {name} | {scanner} | {cell('attack')} | {cell('attack', 'en')} | {cell('attack', 'other')} |"
                f" {cell('benign')} | {cell('benign', 'en')} | {cell('benign', 'other')} |"
            )
            print(lines[-1], flush=True)

    # LoCoMo: every turn appended to its session's daily log, through both scanners.
    conversation = list(turns())
    if args.locomo_limit:
        conversation = conversation[: args.locomo_limit]
    times: dict[str, list[float]] = {name: [] for name in vaults}
    locomo_rejected: Counter[str] = Counter()
    for i, (agent, key, line) in enumerate(conversation):
        order = list(vaults.items()) if i % 2 == 0 else list(vaults.items())[::-1]
        for name, vault in order:
            started = time.perf_counter()
            locomo_rejected[name] += rejected(vault, agent, line, mode="append", tier="daily", key=key)
            times[name].append(time.perf_counter() - started)
    # Other languages: each benign held-out item in a fresh document, through fresh scanners (no verdict
    # cached from the held-out pass), alternating.
    fresh = {name: memvault.open("memory", scanner=name) for name in vaults}
    foreign: dict[str, list[float]] = {name: [] for name in vaults}
    for i, text in enumerate(foreign_benign):
        order = list(fresh.items()) if i % 2 == 0 else list(fresh.items())[::-1]
        for name, vault in order:
            started = time.perf_counter()
            rejected(vault, f"cost-{i}", text)
            foreign[name].append(time.perf_counter() - started)
    lines += ["", "| | builtin | multilingual | ratio |", "|---|---|---|---|"]
    lines.append(
        f"| LoCoMo turns rejected (of {len(conversation)}) | {locomo_rejected['builtin']} |"
        f" {locomo_rejected['multilingual']} | |"
    )
    for label, measured in (("LoCoMo turn", times), ("benign text in another language", foreign)):
        p50 = {name: statistics.median(values) * 1000 for name, values in measured.items()}
        lines.append(
            f"| p50 of a retain, {label} ({len(measured['builtin'])}) | {p50['builtin']:.2f} ms |"
            f" {p50['multilingual']:.2f} ms | {p50['multilingual'] / p50['builtin']:.2f}x |"
        )
    plugins = fresh["multilingual"].plugin_manager.get_plugins()
    judges = [p.judge for p in plugins if isinstance(p, MultilingualScanner)]
    lines.append(f"\nWindows e5 embedded for the cost of {len(foreign_benign)} texts: {judges[0].windows_embedded}.")
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n", encoding="utf-8")
    for vault in [*vaults.values(), *fresh.values()]:
        vault.close()


if __name__ == "__main__":
    main()
