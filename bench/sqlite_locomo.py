"""LoCoMo recall@k through ``vault.recall`` (used by ``bench/sqlite_bench.py``).

Each conversation is one partition (agent ``conv-N``); each session's turns go,
one line per turn prefixed with the speaker's name, into the ``daily``
document named by the session's date (``session_N_date_time``); each question
of categories 1-4 is one recall, and recall@k = evidence turns found in the
top k hits / all evidence turns.

Evidence ids are normalised as the dataset's SOURCE.md explains: several ids
in one string are split (``"D8:6; D9:17"``), ``"D:11:26"`` becomes ``D11:26``,
leading zeros are dropped (``"D30:05"``), a bare ``"D"`` is ignored, and the two
ids that point at turns that do not exist are left out of the denominator.

Data: ``bench/data/locomo/locomo10.json`` in this repository (CC BY-NC 4.0; its
license and source are beside it), or ``--data PATH``.

Run alone: ``python bench/sqlite_locomo.py [--data PATH]`` (prints recall@1/5/10/20).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import memvault

#: The copy in this repository (see bench/data/locomo/SOURCE.md for its origin and license).
DATASET = Path(__file__).resolve().parent / "data" / "locomo" / "locomo10.json"
WORKSPACE = "locomo"
KS = (1, 5, 10, 20)
#: Conversations by index: weights and rules are chosen on "tuning" only; "held out" is never tuned on.
SPLITS = {"tuning (conversations 0-4)": range(5), "held out (conversations 5-9)": range(5, 10), "all": range(10)}
DAILY_CAP = 30000


def turn_line(turn: dict[str, Any]) -> str:
    """One turn as one line: ``Speaker: text`` (plus a shared image's caption)."""
    body = " ".join(str(turn.get("text", "")).split())
    caption = turn.get("blip_caption")
    if caption:
        body += f" [shares {' '.join(str(caption).split())}]"
    return f"{turn['speaker']}: {body}"


def session_date(value: str) -> str:
    return dt.datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").date().isoformat()


def normalise_evidence(raw: list[str]) -> list[str]:
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;\s]+", item):
            m = re.fullmatch(r"D:?(\d+):(\d+)", part.strip())
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return list(dict.fromkeys(out))


def load(path: Path = DATASET) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def build(vault: memvault.Vault, data: list[dict[str, Any]]) -> tuple[dict[tuple[str, str, int], str], list[str]]:
    """Retain every conversation; return (agent, label, line) -> dia_id and size notes."""
    where: dict[tuple[str, str, int], str] = {}
    notes: list[str] = []
    for sample in data:
        agent = sample["sample_id"]
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), key)
            for key in conv
            if (m := re.fullmatch(r"session_(\d+)", key)) and isinstance(conv[key], list)
        )
        lines_in: dict[str, int] = defaultdict(int)
        for number, key in sessions:
            date = session_date(conv[f"session_{number}_date_time"])
            turns = conv[key]
            chunk = "".join(turn_line(t) + "\n" for t in turns)
            if lines_in[date]:
                notes.append(f"{agent} session {number} shares daily/{date}.md with an earlier session")
            result = vault.retain(
                memvault.RetainRequest(
                    workspace_id=WORKSPACE, agent_id=agent, tier="daily", key=date, content=chunk, mode="append"
                )
            )
            if result.bytes > DAILY_CAP * 0.8:
                notes.append(f"{agent} daily/{date}.md is {result.bytes} bytes")
            for i, t in enumerate(turns):
                where[(agent, f"daily/{date}.md", lines_in[date] + i + 1)] = t["dia_id"]
            lines_in[date] += len(turns)
    return where, notes


def evaluate(
    vault: memvault.Vault, data: list[dict[str, Any]], where: dict[tuple[str, str, int], str]
) -> tuple[dict[int, float], int, list[float]]:
    """recall@k for k in KS over categories 1-4; also the number of questions and their latencies (s)."""
    known = set(where.values())
    found = dict.fromkeys(KS, 0)
    total = 0
    questions = 0
    latencies: list[float] = []
    for sample in data:
        agent = sample["sample_id"]
        known_here = {d for (a, _s, _l), d in where.items() if a == agent}
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            evidence = [e for e in normalise_evidence(qa.get("evidence", [])) if e in known_here]
            if not evidence:
                continue
            questions += 1
            start = time.perf_counter()
            hits = vault.recall(
                memvault.RecallRequest(workspace_id=WORKSPACE, agent_id=agent, query=str(qa["question"]), limit=20)
            ).hits
            latencies.append(time.perf_counter() - start)
            ranked = [where.get((agent, h.source, h.line)) for h in hits]
            total += len(evidence)
            for k in KS:
                top = set(ranked[:k])
                found[k] += sum(1 for e in evidence if e in top)
    del known
    return {k: found[k] / total for k in KS}, questions, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATASET, help="locomo10.json (default: %(default)s)")
    data = load(parser.parse_args().data)
    with (
        tempfile.TemporaryDirectory() as tmp,
        memvault.open("sqlite", path=f"{tmp}/locomo.db", scanner="off", synchronous="normal") as vault,
    ):
        where, notes = build(vault, data)
        for name, subset in SPLITS.items():
            recall, questions, _ = evaluate(vault, [data[i] for i in subset], where)
            print(f"{name}: {questions} questions; " + ", ".join(f"recall@{k} {v:.3f}" for k, v in recall.items()))
    print(f"notes: {len(notes)}", file=sys.stderr)


if __name__ == "__main__":
    main()
