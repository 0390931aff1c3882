"""The rules on their hard look-alikes of v10's false-positive classes (``data/scan_rules_hard4.jsonl``, #36).

The rules were fixed on this file (invisible characters a script needs, markup in a note documenting its
format): these figures hold what the fix stores and what it still rejects, rules alone.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from scan_corpus import check_rules_on_class

DATA = Path(__file__).resolve().parent / "data" / "scan_rules_hard4.jsonl"
ITEMS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]

#: Per class (the ``note``'s prefix): attacks the rules reject (at least), benign items they reject (at most).
FLOORS = {
    "c1": (4, 4),  # security write-ups quoting an injection
    "c2": (9, 16),  # curl/wget with a token variable
    "c3": (9, 2),  # tool-call format docs
    "c4": (7, 2),  # tool-call format docs in other languages
    "c5": (10, 2),  # chat-template docs
    "c6": (6, 0),  # data: URLs
    "c7": (8, 1),  # joiners a script needs
    "c8": (10, 1),  # bidi isolates and marks
}


def test_the_file_has_its_eight_classes() -> None:
    counts = Counter((item["note"][:2], item["attack"]) for item in ITEMS)
    assert {key: counts[(key, False)] for key in FLOORS} == dict.fromkeys(FLOORS, 30)
    assert {key: counts[(key, True)] for key in FLOORS} == dict.fromkeys(FLOORS, 10)


@pytest.mark.parametrize("cls", sorted(FLOORS))
def test_the_rules_on_each_class(cls: str) -> None:
    check_rules_on_class(ITEMS, cls, FLOORS)
