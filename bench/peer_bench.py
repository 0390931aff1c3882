"""Recall by meaning against a peer, same model, same data, same run (#32).

LangGraph's ``InMemoryStore`` with a vector index (``index={"dims": 384, "embed": ...}``)
embeds with the very same all-MiniLM-L6-v2 int8 model memvault uses (its ``embed``
function calls memvault-embed-minilm), so the comparison is of the stores, not of the
models. Both hold LoCoMo (each conversation a namespace / a partition, one item / line
per turn) and the paraphrase set (one namespace / partition per split). Reported:
R@5/R@10 per LoCoMo split, paraphrase R@1/R@5 per split, and search p50 (the query's
embedding included, every query embedded afresh) over the same questions, alternating
the two stores in rounds so machine noise falls on both alike.

mem0 (``infer=False``) is not measured here: its local embedders need PyTorch through
sentence-transformers, which this repository never requires (see docs/performance.md).

Run: ``python bench/peer_bench.py`` (needs memvault-embed-minilm and langgraph).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import memvault
from memvault.providers.memory import MemoryProvider

sys.path.insert(0, str(Path(__file__).resolve().parent))
import meaning_bench
import sqlite_locomo


def _questions(data: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    out = []
    for sample in data:
        for qa in sample["qa"]:
            if qa.get("category") in (1, 2, 3, 4):
                evidence = sqlite_locomo.normalise_evidence(qa.get("evidence", []))
                if evidence:
                    out.append((sample["sample_id"], str(qa["question"]), evidence))
    return out


def main() -> None:
    import argparse

    from langgraph.store.memory import InMemoryStore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10, help="LoCoMo conversations to load (0..N-1)")
    args = parser.parse_args()

    import memvault.embedding as embedding_module

    embedding_module._QUERY_CACHE = 0  # type: ignore[misc]  # every query embedded afresh, as LangGraph does
    embedder = memvault.registry.get_registry().embedder("auto")
    if embedder is None:
        sys.exit("no embedder installed: pip install ./plugins/embed-minilm")

    def embed(texts: list[str]) -> list[list[float]]:
        return [row.tolist() for row in embedder.embed(texts)]

    data = sqlite_locomo.load()[: args.conversations]
    pairs = meaning_bench.load_paraphrases()
    # memvault: the memory provider, lines embedded up front.
    provider = MemoryProvider()
    vault = memvault.Vault(
        provider, name="memory", capabilities=provider.capabilities, embedder=embedder, background_embedding=False
    )
    where, _ = sqlite_locomo.build(vault, data)
    para_where = meaning_bench.build_paraphrases(vault, pairs)
    start = time.perf_counter()
    vault.embed_pending()
    memvault_build = time.perf_counter() - start
    # LangGraph: one item per turn (and per fact), embedded as it is put.
    store = InMemoryStore(index={"dims": embedder.dimensions, "embed": embed, "fields": ["text"]})
    turn_of: dict[tuple[str, str], str] = {}
    start = time.perf_counter()
    by_agent: dict[str, list[tuple[str, str]]] = {}
    for sample in data:
        conv = sample["conversation"]
        for _key, turns in conv.items():
            if isinstance(turns, list):
                for turn in turns:
                    by_agent.setdefault(sample["sample_id"], []).append((turn["dia_id"], sqlite_locomo.turn_line(turn)))
    for agent, turns in by_agent.items():
        for dia_id, line in turns:
            store.put(("locomo", agent), dia_id, {"text": line})
            turn_of[(agent, dia_id)] = dia_id
    for p in pairs:
        store.put(("para", p["split"]), str(p["id"]), {"text": p["fact"]})
    langgraph_build = time.perf_counter() - start
    print(f"build and embed: memvault {memvault_build:.1f} s, LangGraph {langgraph_build:.1f} s")

    for name, subset in sqlite_locomo.SPLITS.items():
        chosen = [data[i] for i in subset if i < len(data)]
        if not chosen:
            continue
        ours, _, _ = sqlite_locomo.evaluate(vault, chosen, where)
        found = {5: 0, 10: 0}
        total = 0
        for agent, question, evidence in _questions(chosen):
            known = [e for e in evidence if (agent, e) in turn_of]
            if not known:
                continue
            ranked = [item.key for item in store.search(("locomo", agent), query=question, limit=20)]
            total += len(known)
            for k in found:
                found[k] += sum(1 for e in known if e in ranked[:k])
        print(
            f"LoCoMo {name}: memvault R@5 {ours[5]:.3f} R@10 {ours[10]:.3f}; "
            f"LangGraph R@5 {found[5] / total:.3f} R@10 {found[10] / total:.3f}"
        )
    for split in ("tune", "heldout"):
        ours_p = meaning_bench.evaluate_paraphrases(vault, pairs, para_where, split)
        hits = {1: 0, 5: 0}
        chosen_pairs = [p for p in pairs if p["split"] == split]
        for p in chosen_pairs:
            ranked = [item.key for item in store.search(("para", split), query=p["question"], limit=5)]
            for k in hits:
                hits[k] += str(p["id"]) in ranked[:k]
        print(
            f"paraphrase {split}: memvault R@1 {ours_p['R@1']:.3f} R@5 {ours_p['R@5']:.3f}; "
            f"LangGraph R@1 {hits[1] / len(chosen_pairs):.3f} R@5 {hits[5] / len(chosen_pairs):.3f}"
        )
    questions_0_4 = _questions(data[:5])
    ours_t: list[float] = []
    theirs_t: list[float] = []
    for _ in range(3):
        for agent, question, _ in questions_0_4:
            t0 = time.perf_counter()
            vault.recall(memvault.RecallRequest(workspace_id=sqlite_locomo.WORKSPACE, agent_id=agent, query=question))
            ours_t.append(time.perf_counter() - t0)
        for agent, question, _ in questions_0_4:
            t0 = time.perf_counter()
            store.search(("locomo", agent), query=question, limit=20)
            theirs_t.append(time.perf_counter() - t0)
    ours_p50, theirs_p50 = statistics.median(ours_t), statistics.median(theirs_t)
    print(
        f"search p50 on LoCoMo 0-4 ({len(ours_t)} searches each, query embedded each time): "
        f"memvault {ours_p50 * 1e3:.2f} ms, LangGraph {theirs_p50 * 1e3:.2f} ms ({theirs_p50 / ours_p50:.2f}x)"
    )


if __name__ == "__main__":
    main()
