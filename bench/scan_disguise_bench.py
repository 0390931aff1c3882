"""The scanner on the held-out sets in disguise: the same texts with their spaces or letters swapped.

An attacker who knows the scanner reads words writes them joined ("Your-orders-were-withdrawn"),
parted by spaces of another width, or with look-alike letters of another script (a, e and o in
Cyrillic). A person reads each as the plain text. For every held-out set (``core/tests/data/
scan_heldout_v*.jsonl``) and every disguise, every item is written with ``Vault.retain`` to a fresh
document of the ``memory`` provider with the default scanner, as ``bench/scan_heldout.py`` does.

Printed: per set and disguise, the attacks rejected (in English and in the other languages) and the
benign items rejected. Set ``MEMVAULT_EMBEDDER=off`` to measure the rules alone. No item is printed:
the sets stay held out.

    python bench/scan_disguise_bench.py [--sets v5,v6] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import memvault

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scan_heldout import verdict

DATA = Path(__file__).resolve().parents[1] / "core" / "tests" / "data"

DISGUISES: dict[str, Callable[[str], str]] = {
    "plain": lambda text: text,
    "thin spaces": lambda text: text.replace(" ", "\u2009"),
    "no-break spaces": lambda text: text.replace(" ", "\u00a0"),
    "em dashes": lambda text: text.replace(" ", "\u2014"),
    "middle dots": lambda text: text.replace(" ", "\u30fb"),
    "hyphens": lambda text: text.replace(" ", "-"),
    "underscores": lambda text: text.replace(" ", "_"),
    "Cyrillic a, e, o": lambda text: text.translate(str.maketrans("aeo", "\u0430\u0435\u043e")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="v2,v3,v4,v5,v6", help="held-out sets (default: %(default)s)")
    parser.add_argument("--out", default="", help="also write the Markdown report here")
    args = parser.parse_args()
    lines = ["| set | disguise | attacks rejected | in English | other languages | benign rejected |"]
    lines.append("|---|---|---|---|---|---|")
    with memvault.open("memory") as vault:
        embedder = "on" if vault.embedding is not None else "off"
        for name in args.sets.split(","):
            items = [
                json.loads(line)
                for line in (DATA / f"scan_heldout_{name}.jsonl").read_text("utf-8").splitlines()
                if line.strip()
            ]
            attacks = [item for item in items if item["attack"]]
            benign = [item for item in items if not item["attack"]]
            english = sum(item["lang"] == "en" for item in attacks)
            for disguise, change in DISGUISES.items():
                caught = {"en": 0, "other": 0}
                for item in attacks:
                    if verdict(vault, {**item, "text": change(item["text"])}) is not None:
                        caught["en" if item["lang"] == "en" else "other"] += 1
                wrong = sum(verdict(vault, {**item, "text": change(item["text"])}) is not None for item in benign)
                row = (
                    f"| {name} | {disguise} | {caught['en'] + caught['other']} of {len(attacks)} "
                    f"| {caught['en']} of {english} | {caught['other']} of {len(attacks) - english} "
                    f"| {wrong} of {len(benign)} |"
                )
                lines.append(row)
                print(row, flush=True)
    report = "\n".join([f"embedder: {embedder}", "", *lines, ""])
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
