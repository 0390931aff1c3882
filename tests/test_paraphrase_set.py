"""The paraphrase set (bench/data/paraphrase.jsonl) is what it claims to be.

Every question asks for its fact in other words: no stemmed content word in
common (the checker is bench/paraphrase_check.py, which recall-by-meaning
benchmarks rely on); at least 120 pairs, split in two equal halves fixed in
the file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paraphrase_check", ROOT / "bench" / "paraphrase_check.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_question_shares_a_content_word_with_its_fact() -> None:
    check = _checker()
    pairs = check.load()
    assert check.problems(pairs) == []


def test_the_set_is_large_enough_and_split_in_halves() -> None:
    pairs = _checker().load()
    assert len(pairs) >= 120
    assert {p["split"] for p in pairs} == {"tune", "heldout"}
    tune = sum(1 for p in pairs if p["split"] == "tune")
    assert abs(tune - (len(pairs) - tune)) <= 1


def test_the_checker_catches_shared_words_stemmed_and_in_any_case() -> None:
    check = _checker()
    pair = {"id": "x1", "fact": "Pays the rent monthly.", "question": "Which MONTH is the rent due?", "split": "tune"}
    found = check.problems([pair, {**pair, "id": "x2", "split": "heldout"}])
    assert len(found) == 2
    assert "['month', 'rent']" in found[0]
    # stop words alone are not a shared word
    clean = {"id": "y1", "fact": "She is vegetarian.", "question": "Does she avoid meat?", "split": "tune"}
    assert check.problems([clean, {**clean, "id": "y2", "split": "heldout"}]) == []


def test_the_checker_catches_a_malformed_set() -> None:
    check = _checker()
    pair = {"id": "a", "fact": "Drives a green car.", "question": "What vehicle?", "split": "train"}
    found = check.problems([pair, pair, {"id": "b", "fact": "", "question": "x", "split": "tune"}])
    assert any("repeated" in f for f in found)
    assert any("split must be" in f for f in found)
    assert any("non-empty" in f for f in found)
