"""The prompt-injection scanner on a held-out set: catch rate per category and language, false positives.

Data: ``core/tests/data/scan_heldout_v12.jsonl`` (issue 36; its README says how it was
written). Every item is written with ``Vault.retain`` to a fresh document of the
``memory`` provider with the default scanner, as ``core/tests/test_scan_heldout.py``
does; ``ContentRejected`` counts as rejected. The embedder is the vault's default
(``MEMVAULT_EMBEDDER``): set ``MEMVAULT_EMBEDDER=off`` to measure the rules alone.

Printed: per category and per language, the attacks and how many were rejected
(and how many of those with the category the attack was written for), then the
benign items rejected, by id. The attacks' own ids are not printed: the set stays
held out only while nobody tunes the scanner to its items.

    MEMVAULT_EMBEDDER=off python bench/scan_heldout.py [--data FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import memvault
from memvault import ContentRejected, RetainRequest

DATA = Path(__file__).resolve().parents[1] / "core" / "tests" / "data" / "scan_heldout_v12.jsonl"


def verdict(vault: memvault.Vault, item: dict[str, Any]) -> str | None:
    """The category ``item`` is rejected with, or ``None`` when it is stored."""
    try:
        vault.retain(
            RetainRequest(
                workspace_id="heldout",
                agent_id=f"agent-{item['id']}",
                tier="AGENT",
                content=item["text"],
                mode="replace",
            )
        )
    except ContentRejected as rejected:
        return rejected.category
    return None


def table(
    title: str,
    keys: list[str],
    total: collections.Counter[str],
    caught: collections.Counter[str],
    same: collections.Counter[str],
) -> list[str]:
    lines = [f"| {title} | attacks | rejected | rate | same category |", "|---|---|---|---|---|"]
    for key in keys:
        t, c, s = total[key], caught[key], same[key]
        lines.append(f"| {key} | {t} | {c} | {c / t:.1%} | {s / t:.1%} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="the JSONL set (default: %(default)s)")
    parser.add_argument("--out", default="", help="also write the Markdown report here")
    args = parser.parse_args()
    items = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]

    total: collections.Counter[str] = collections.Counter()
    caught: collections.Counter[str] = collections.Counter()
    same: collections.Counter[str] = collections.Counter()
    benign_total: collections.Counter[str] = collections.Counter()
    false_positives: list[tuple[str, str, str]] = []
    started = time.perf_counter()
    with memvault.open("memory") as vault:
        embedder = "on" if vault.embedding is not None else "off"
        for item in items:
            category = verdict(vault, item)
            if item["attack"]:
                for key in (item["category"], f"lang:{item['lang']}", "all"):
                    total[key] += 1
                    caught[key] += category is not None
                    same[key] += category == item["category"]
            else:
                benign_total[item["lang"]] += 1
                if category is not None:
                    false_positives.append((item["id"], category, item["note"]))
    elapsed = time.perf_counter() - started

    categories = [k for k in total if not k.startswith("lang:") and k != "all"]
    languages = sorted(k for k in total if k.startswith("lang:"))
    lines = [
        f"Held-out set: {args.data.name}, {total['all']} attacks, {sum(benign_total.values())} benign; "
        f"memory provider, default scanner, MEMVAULT_EMBEDDER={os.environ.get('MEMVAULT_EMBEDDER', '')!r} "
        f"(embedding {embedder}); "
        f"{elapsed:.1f} s.",
        "",
        *table("category", [*categories, "all"], total, caught, same),
        "",
        *table("language", languages, total, caught, same),
        "",
        f"Benign rejected: {len(false_positives)} of {sum(benign_total.values())} "
        f"({sum(v for k, v in benign_total.items() if k != 'en')} not in English).",
    ]
    lines += [f"- {id_}: {category} ({note})" for id_, category, note in false_positives]
    report = "\n".join(line.replace("| lang:", "| ") for line in lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n", encoding="utf-8")
    print(f"{len(items)} items from {args.data}", file=sys.stderr)


if __name__ == "__main__":
    main()
