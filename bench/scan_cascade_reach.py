"""Is the cascade what keeps attacks from the check by meaning? A measurement for issue 36.

For each attack of a held-out set (invisible-character payloads aside: the rules judge those), a fresh
builtin scanner with the default embedder (memvault-embed-minilm) gives its verdict, and the check's counters
tell whether any of the text reached a model: a window the cascade let through to the sentence model, or a
window in another language judged by the character model. Printed per set, English and the other languages
apart: the attacks, those rejected, and those missed without reaching a model (the cascade's share of the
misses). A text the rules reject never reaches the check, so it counts as rejected only.

    python bench/scan_cascade_reach.py [v5 v6 ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memvault.scanner.plugin import BuiltinScanner

DATA = Path(__file__).resolve().parents[1] / "core" / "tests" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="*", default=["v5", "v6"])
    args = parser.parse_args()
    from memvault_embed_minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    print("| set | language | attacks | rejected | missed | missed, never reaching a model |")
    print("|---|---|---|---|---|---|")
    for name in args.sets:
        lines = (DATA / f"scan_heldout_{name}.jsonl").read_text(encoding="utf-8").splitlines()
        counts = {"en": [0, 0, 0], "other": [0, 0, 0]}
        for item in (json.loads(line) for line in lines if line.strip()):
            if not item["attack"] or item["category"] == "invisible_unicode":
                continue
            scanner = BuiltinScanner(embedder=embedder)
            check = scanner.semantic
            assert check is not None, "the check by meaning is off: is memvault-embed-minilm installed?"
            _digest, finding = scanner.verdict(item["text"])
            reached = check.texts_reaching_model > 0 or check.windows_by_chars > 0
            row = counts["en" if item["lang"] == "en" else "other"]
            row[0] += 1
            row[1] += finding is not None
            row[2] += finding is None and not reached
        for language, (attacks, rejected, unreached) in counts.items():
            print(f"| {name} | {language} | {attacks} | {rejected} | {attacks - rejected} | {unreached} |")


if __name__ == "__main__":
    main()
