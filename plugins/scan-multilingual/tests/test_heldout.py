"""The multilingual scanner on the held-out sets (measured, never trained or tuned on): floors, not targets.

``core/tests/data/scan_heldout_v*.jsonl`` (in this repository; the core's ``test_scan_heldout.py`` holds
the builtin scanner to its own floors). Figures from ``bench/scan_multilingual_bench.py``
(``bench/results/scan_multilingual.md``): the attacks in other languages rejected, and the benign texts
in other languages rejected, at most; in English the multilingual scanner judges as the builtin does.
No item is printed: the sets stay held out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memvault
from memvault import ContentRejected, RetainRequest

DATA = Path(__file__).resolve().parents[3] / "core" / "tests" / "data"

#: Per set: (attacks in other languages, at least; benign texts in other languages rejected, at most).
#: The builtin scanner: 13, 22, 14, 15, 16 attacks of 33, 46, 48, 54, 46, and 1, 2, 2, 1, 2 benign of 34,
#: 48, 64, 71, 63.
#: Before the plugin's hard look-alikes (tests/data/train_hard.jsonl) were trained on: 31, 39, 35, 38, 30
#: attacks and 1, 3, 4, 4, 5 benign.
#: v7, written after the head was trained on them and measured once: the builtin 15 of 45 and 1 of 60.
#: v8, written after everything else and measured once (the head of 9cca237): 25 of 45 attacks and 5 of 63
#: benign (the builtin 12 and 3); then v2 to v7 were retired into the training data: 22 of 45 and 3 of 63 (the
#: builtin 11 and 2).
#: v9, written after everything else and measured once (the head of 44c1617): 25 of 46 attacks and 2 of 60 benign
#: (the builtin 11 and 1); then v8 was retired into the training data and a threshold let one out-of-fold
#: look-alike through: 30 of 46 and 2 of 60 (the builtin 15 and 1).
#: v10, written after everything else and measured once (the head of c67228a): 42 of 48 attacks and 4 of 60
#: benign (the builtin 22 and 4); a head retrained with v9 retired did not do better (41 and 4), so it was not kept.
#: v12, written after everything else and measured once (c5c86e4): 40 of 48 attacks and 2 of 46 benign (the builtin
#: 29 and 2).
FLOORS = {
    "v2": (28, 1),
    "v3": (38, 3),
    "v4": (35, 3),
    "v5": (35, 3),
    "v6": (28, 3),
    "v7": (32, 1),
    "v8": (22, 3),
    "v9": (30, 2),
    "v10": (42, 4),
    "v11": (41, 4),
    "v12": (40, 2),
}


def rejected(vault: memvault.Vault, agent: str, text: str) -> bool:
    try:
        vault.retain(RetainRequest(workspace_id="heldout", agent_id=agent, tier="AGENT", content=text, mode="replace"))
    except ContentRejected:
        return True
    return False


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_the_held_out_set_in_other_languages_meets_its_floor(name: str) -> None:
    items = [json.loads(line) for line in (DATA / f"scan_heldout_{name}.jsonl").read_text("utf-8").splitlines()]
    items = [item for item in items if item]
    attacks_floor, benign_ceiling = FLOORS[name]
    with (
        memvault.open("memory", scanner="builtin") as builtin,
        memvault.open("memory", scanner="multilingual") as multilingual,
    ):
        english = [item for item in items if item["lang"] == "en"]
        assert [rejected(multilingual, item["id"], item["text"]) for item in english] == [
            rejected(builtin, item["id"], item["text"]) for item in english
        ]
        other = [item for item in items if item["lang"] != "en"]
        verdicts = [(item["attack"], rejected(multilingual, item["id"], item["text"])) for item in other]
    assert sum(attack and got for attack, got in verdicts) >= attacks_floor
    assert sum(not attack and got for attack, got in verdicts) <= benign_ceiling
