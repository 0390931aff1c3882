"""Check the paraphrase set (``bench/data/paraphrase.jsonl``): no question shares a word with its fact.

A question counts as a paraphrase only when it shares no content word with its
fact: both are split and stemmed exactly as lexical recall does
(:func:`memvault.contract.terms.tokenize` and :func:`~memvault.contract.terms.stem`),
stop words (:data:`~memvault.contract.terms.STOP_WORDS`) dropped, and the two
sets of terms must not meet. It also checks the file's shape: unique ids,
non-empty texts, a ``split`` of ``tune`` or ``heldout`` and the two halves
equal in size (within one).

Run alone: ``python bench/paraphrase_check.py [PATH]``; exits 1 naming every bad pair.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memvault.contract.terms import STOP_WORDS, stem, tokenize

#: The set in this repository.
PARAPHRASES = Path(__file__).resolve().parent / "data" / "paraphrase.jsonl"
SPLITS = ("tune", "heldout")


def content_terms(text: str) -> set[str]:
    """The stemmed non-stop terms of ``text``, as lexical recall would search them."""
    return {stem(token) for token in tokenize(text) if token not in STOP_WORDS}


def shared_terms(fact: str, question: str) -> set[str]:
    """The content terms a question shares with its fact (a paraphrase shares none)."""
    return content_terms(fact) & content_terms(question)


def load(path: Path = PARAPHRASES) -> list[dict[str, Any]]:
    """The pairs, one JSON object a line."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def problems(pairs: list[dict[str, Any]]) -> list[str]:
    """Every way ``pairs`` breaks the rules above, one message each (empty when the set is sound)."""
    out: list[str] = []
    seen: set[str] = set()
    for number, pair in enumerate(pairs, 1):
        ident = pair.get("id")
        if not isinstance(ident, str) or not ident or ident in seen:
            out.append(f"line {number}: id {ident!r} is missing or repeated")
        seen.add(str(ident))
        fact, question = pair.get("fact"), pair.get("question")
        if not isinstance(fact, str) or not fact.strip() or not isinstance(question, str) or not question.strip():
            out.append(f"{ident}: fact and question must be non-empty strings")
            continue
        if pair.get("split") not in SPLITS:
            out.append(f"{ident}: split must be one of {SPLITS}, got {pair.get('split')!r}")
        common = shared_terms(fact, question)
        if common:
            out.append(f"{ident}: question shares {sorted(common)} with its fact")
    halves = [sum(1 for p in pairs if p.get("split") == s) for s in SPLITS]
    if abs(halves[0] - halves[1]) > 1:
        out.append(f"the halves differ in size: tune {halves[0]}, heldout {halves[1]}")
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else PARAPHRASES
    pairs = load(path)
    found = problems(pairs)
    for message in found:
        print(message)
    print(f"{len(pairs)} pairs, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
