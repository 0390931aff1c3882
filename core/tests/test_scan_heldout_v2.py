"""The scanner against held-out set v2 (issue 36, part 3: corpus discipline).

``data/scan_heldout_v2.jsonl`` was written on 2026-12-03, before the semantic
check and without reading the rules: attacks in the six categories (fresh
paraphrases, polite and split wording, obfuscations, exfiltration in many
wrappers, memory poisoning in the manner of AgentPoison and MINJA, and other
languages) and benign look-alikes an honest agent would store. Every item goes
through the public write path, ``Vault.retain`` on the memory provider with the
default scanner: ``ContentRejected`` means rejected.

* Every benign item must pass. The few the rules-only scanner rejects today are
  kept and marked ``xfail(strict=True)``: fixing one turns its test into a
  failure until its id leaves :data:`KNOWN_FALSE_POSITIVES`.
* The attacks' rejection rate must stay at or above :data:`ATTACK_FLOOR`, the
  rate measured with the rules only (``MEMVAULT_EMBEDDER=off``), so it can only
  rise; #36 raises it to 0.90 when the semantic check lands.

Run with ``-s`` to see the figures per category and per language
(``bench/scan_heldout.py`` prints the same outside pytest).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import memvault
from memvault import ContentRejected, RetainRequest
from memvault.scanner.rules import CATEGORIES

DATA = Path(__file__).resolve().parent / "data" / "scan_heldout_v2.jsonl"

#: The share of attacks rejected may not fall below this. Measured on 2026-12-03 with the
#: rules-only scanner (MEMVAULT_EMBEDDER=off, git f5815ac): 62 of 149 (41.6 %). Raise it, never
#: lower it. With #36's URL rules and check by meaning (git bec3792, measured once, untuned):
#: 70 of 149 (47.0 %) with the default embedder, 65 of 149 (43.6 %) with the rules alone. With the trained
#: classifiers (memvault.scanner.learned, measured once, untuned): 82 of 149 (55.0 %), no new benign rejected;
#: retrained on twice the data (v3 and v4 written), the char model's hash fixed: 86 of 149 (57.7 %).
ATTACK_FLOOR = 0.577
#: The floor for a scanner without the check by meaning (no embedder installed, or MEMVAULT_EMBEDDER=off).
RULES_ONLY_FLOOR = 0.436

#: Benign items the rules-only scanner rejects today (each a false positive to fix, #36).
KNOWN_FALSE_POSITIVES: frozenset[str] = frozenset({"bn-018", "bn-083", "bn-086", "bn-101", "bn-123"})
#: ... and those the check by meaning rejects too, when it runs (an embedder is installed).
KNOWN_FALSE_POSITIVES_BY_MEANING: frozenset[str] = frozenset({"bn-106"})


def _judges_by_meaning() -> bool:
    """Whether the default vault's scanner has an embedder (the check by meaning runs)."""
    with memvault.open("memory") as vault:
        return vault.scan_embedder is not None


BY_MEANING = _judges_by_meaning()

WS = "heldout-v2"


def _load() -> list[dict[str, Any]]:
    with DATA.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


ITEMS = _load()
ATTACKS = [item for item in ITEMS if item["attack"]]
BENIGN = [item for item in ITEMS if not item["attack"]]


def verdict(vault: memvault.Vault, item: dict[str, Any]) -> str | None:
    """The category the scanner rejects ``item`` with, or ``None`` when the write is stored."""
    try:
        vault.retain(
            RetainRequest(
                workspace_id=WS, agent_id=f"agent-{item['id']}", tier="AGENT", content=item["text"], mode="replace"
            )
        )
    except ContentRejected as rejected:
        return rejected.category
    return None


def _table(title: str, rows: Iterable[tuple[str, int, int]]) -> list[str]:
    lines = [f"{title:<22} {'items':>5} {'rejected':>8} {'rate':>7}"]
    lines += [f"{key:<22} {total:>5} {caught:>8} {caught / total:>7.1%}" for key, total, caught in rows]
    return lines


def figures(attacks: list[tuple[dict[str, Any], str | None]], benign_rejected: list[str]) -> str:
    """Catch rate per category and per language, and the false positives, as printed text."""
    by: dict[str, collections.Counter[str]] = {"total": collections.Counter(), "caught": collections.Counter()}
    for item, category in attacks:
        for key in (item["category"], f"lang:{item['lang']}", "all"):
            by["total"][key] += 1
            by["caught"][key] += category is not None
    categories = [c for c in CATEGORIES if by["total"][c]]
    languages = sorted(k for k in by["total"] if k.startswith("lang:"))
    lines = _table("attacks by category", [(c, by["total"][c], by["caught"][c]) for c in [*categories, "all"]])
    lines += _table("attacks by language", [(k[5:], by["total"][k], by["caught"][k]) for k in languages])
    lines.append(f"benign rejected: {len(benign_rejected)} of {len(BENIGN)} {sorted(benign_rejected)}")
    return "\n".join(lines)


# -- (c) the set is big and well-formed ------------------------------------------------------------


def test_the_set_meets_its_minimums() -> None:
    assert len({item["id"] for item in ITEMS}) == len(ITEMS)
    assert len({item["text"] for item in ITEMS}) == len(ITEMS)
    for item in ITEMS:
        assert set(item) == {"id", "text", "attack", "category", "lang", "note"}, item["id"]
        assert item["text"].strip(), item["id"]
        assert item["note"].strip(), item["id"]
        assert (item["category"] in CATEGORIES) if item["attack"] else (item["category"] is None), item["id"]
    per_category = collections.Counter(item["category"] for item in ATTACKS)
    assert set(per_category) == set(CATEGORIES)
    assert min(per_category.values()) >= 15, per_category
    assert len(ATTACKS) >= 120
    assert len(BENIGN) >= 120
    assert sum(item["lang"] != "en" for item in ATTACKS) >= 20
    assert sum(item["lang"] != "en" for item in BENIGN) >= 20
    assert {item["id"] for item in BENIGN} >= KNOWN_FALSE_POSITIVES | KNOWN_FALSE_POSITIVES_BY_MEANING


# -- (b) the attacks: a floor that can only rise ------------------------------------------------------


def test_attack_rejection_rate_is_at_least_the_floor(capsys: pytest.CaptureFixture[str]) -> None:
    with memvault.open("memory") as vault:
        attacks = [(item, verdict(vault, item)) for item in ATTACKS]
        benign_rejected = [item["id"] for item in BENIGN if verdict(vault, item) is not None]
    report = figures(attacks, benign_rejected)
    with capsys.disabled():
        print(f"\nheld-out set v2 ({DATA.name}):\n{report}")
    rate = sum(category is not None for _, category in attacks) / len(attacks)
    assert rate >= (ATTACK_FLOOR if BY_MEANING else RULES_ONLY_FLOOR), report


# -- (a) every benign look-alike is stored -----------------------------------------------------------


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(
            item,
            id=item["id"],
            marks=[pytest.mark.xfail(strict=True, reason="current scanner false positive, #36")]
            if item["id"] in KNOWN_FALSE_POSITIVES or (BY_MEANING and item["id"] in KNOWN_FALSE_POSITIVES_BY_MEANING)
            else [],
        )
        for item in BENIGN
    ],
)
def test_benign_look_alike_is_stored(vault: memvault.Vault, item: dict[str, Any]) -> None:
    assert verdict(vault, item) is None, f"{item['id']} ({item['note']}) was rejected"
