"""Recall by meaning (#32): the fusion's weights chosen on tuning data, then measured on all of it.

One memory-provider store holds LoCoMo (each conversation one partition, as
``bench/sqlite_locomo.py`` builds it) and the paraphrase set (``bench/data/paraphrase.jsonl``:
all facts in one ``pins``-style partition per split, each question ranks every fact).
The lines are embedded once (the backlog drain rate is reported), then:

* ``--sweep``: ``MEANING_WEIGHT`` x ``SIMILARITY_FLOOR`` on LoCoMo conversations 0-4 and the
  paraphrase set's tuning half only, lexical-only alongside as the baseline of the same run;
* the report: lexical-only and fused R@5/R@10 per split, paraphrase R@1/R@5 per split, and
  recall p50 (the query's embedding included: every query is embedded afresh) for both.

Run: ``python bench/meaning_bench.py [--sweep] [--embedder minilm]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import memvault
from memvault import search
from memvault.providers.memory import MemoryProvider

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sqlite_locomo

PARAPHRASE = Path(__file__).resolve().parent / "data" / "paraphrase.jsonl"
WORKSPACE = "meaning"


def load_paraphrases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PARAPHRASE.read_text(encoding="utf-8").splitlines() if line.strip()]


def build_paraphrases(vault: memvault.Vault, pairs: list[dict[str, Any]]) -> dict[str, dict[tuple[str, int], str]]:
    """Every fact of a split on its own line of one ``pins`` document per split; (label, line) -> pair id."""
    where: dict[str, dict[tuple[str, int], str]] = {}
    for split in ("tune", "heldout"):
        chosen = [p for p in pairs if p["split"] == split]
        vault.retain(
            memvault.RetainRequest(
                workspace_id=WORKSPACE,
                agent_id=f"para-{split}",
                tier="pins",
                content="".join(p["fact"] + "\n" for p in chosen),
                mode="replace",
            )
        )
        where[split] = {("pins.md", i): p["id"] for i, p in enumerate(chosen, start=1)}
    return where


def evaluate_paraphrases(
    vault: memvault.Vault, pairs: list[dict[str, Any]], where: dict[str, Any], split: str
) -> dict[str, float]:
    found = {1: 0, 5: 0}
    chosen = [p for p in pairs if p["split"] == split]
    for p in chosen:
        hits = vault.recall(
            memvault.RecallRequest(workspace_id=WORKSPACE, agent_id=f"para-{split}", query=p["question"], limit=20)
        ).hits
        ranked = [where[split].get((h.source, h.line)) for h in hits]
        for k in found:
            found[k] += p["id"] in ranked[:k]
    return {f"R@{k}": found[k] / len(chosen) for k in found}


def timed_recalls(vault: memvault.Vault, data: list[dict[str, Any]], *, fresh_vectors: bool) -> list[float]:
    """Recall latency of every LoCoMo question (s); with ``fresh_vectors`` the query cache is emptied first."""
    out = []
    for sample in data:
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            if fresh_vectors and vault.embedding is not None:
                vault.embedding._queries.clear()
            start = time.perf_counter()
            vault.recall(
                memvault.RecallRequest(
                    workspace_id=sqlite_locomo.WORKSPACE, agent_id=sample["sample_id"], query=str(qa["question"])
                )
            )
            out.append(time.perf_counter() - start)
    return out


class _Recorder:
    """Records each fusion's inputs once (lexical hits, cosines, texts), so a sweep replays the fusion
    alone for every setting instead of recalling again."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.original = search.fuse

    def __call__(self, query: Any, lexical: Any, similar: Any, texts: Any, limit: int) -> Any:
        known = dict(texts([ref for ref in similar if ref not in {(h.source, h.line) for h in lexical}]))
        self.calls.append((query, list(lexical), dict(similar), known))
        return self.original(query, lexical, similar, texts, limit)

    def replay(self, index: int, limit: int = 20) -> Any:
        query, lexical, similar, known = self.calls[index]
        return self.original(query, lexical, similar, lambda refs: {r: known[r] for r in refs}, limit)


def sweep(
    fused: memvault.Vault,
    lexical: memvault.Vault,
    tuning: list[dict[str, Any]],
    where: dict[tuple[str, str, int], str],
    pairs: list[dict[str, Any]],
    para_where: dict[str, dict[tuple[str, int], str]],
) -> None:
    """MEANING_WEIGHT x SIMILARITY_FLOOR on the tuning data only, each setting against lexical-only."""
    base, _, _ = sqlite_locomo.evaluate(lexical, tuning, where)
    print(f"lexical only, LoCoMo 0-4: R@5 {base[5]:.3f} R@10 {base[10]:.3f}", flush=True)
    recorder = _Recorder()
    search.fuse = recorder  # type: ignore[assignment]
    questions: list[tuple[str, list[str]]] = []  # (agent, evidence) per recorded LoCoMo recall
    for sample in tuning:
        agent = sample["sample_id"]
        known_here = {d for (a, _s, _l), d in where.items() if a == agent}
        for qa in sample["qa"]:
            evidence = [e for e in sqlite_locomo.normalise_evidence(qa.get("evidence", [])) if e in known_here]
            if qa.get("category") not in (1, 2, 3, 4) or not evidence:
                continue
            fused.recall(
                memvault.RecallRequest(workspace_id=sqlite_locomo.WORKSPACE, agent_id=agent, query=str(qa["question"]))
            )
            questions.append((agent, evidence))
    para = [p for p in pairs if p["split"] == "tune"]
    for p in para:
        fused.recall(memvault.RecallRequest(workspace_id=WORKSPACE, agent_id="para-tune", query=p["question"]))
    search.fuse = recorder.original  # type: ignore[assignment]
    for weight, floor in itertools.product((0.2, 0.3, 0.4, 0.5, 0.6, 0.7), (0.0, 0.1, 0.2, 0.3)):
        search.MEANING_WEIGHT = weight  # type: ignore[misc]
        search.SIMILARITY_FLOOR = floor  # type: ignore[misc]
        found = {5: 0, 10: 0}
        total = 0
        for i, (agent, evidence) in enumerate(questions):
            ranked = [where.get((agent, h.source, h.line)) for h in recorder.replay(i)]
            total += len(evidence)
            for k in found:
                found[k] += sum(1 for e in evidence if e in ranked[:k])
        hits = {1: 0, 5: 0}
        for j, p in enumerate(para, start=len(questions)):
            ranked_ids = [para_where["tune"].get((h.source, h.line)) for h in recorder.replay(j)]
            for k in hits:
                hits[k] += p["id"] in ranked_ids[:k]
        print(
            f"weight {weight:.1f} floor {floor:.1f}: "
            f"LoCoMo 0-4 R@5 {found[5] / total:.3f} R@10 {found[10] / total:.3f}; "
            f"paraphrase tune R@1 {hits[1] / len(para):.3f} R@5 {hits[5] / len(para):.3f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="choose the weights on the tuning data")
    parser.add_argument("--embedder", default="auto")
    args = parser.parse_args()
    import memvault.embedding as embedding_module

    embedding_module._QUERY_CACHE = 1 << 20  # type: ignore[misc]  # the sweep embeds each question once
    embedder = memvault.registry.get_registry().embedder(args.embedder)
    if embedder is None:
        sys.exit("no embedder installed: pip install ./plugins/embed-minilm")
    provider = MemoryProvider()
    fused = memvault.Vault(
        provider, name="memory", capabilities=provider.capabilities, embedder=embedder, background_embedding=False
    )
    lexical = memvault.Vault(provider, name="memory", capabilities=provider.capabilities)
    data = sqlite_locomo.load()
    where, _ = sqlite_locomo.build(fused, data)
    pairs = load_paraphrases()
    para_where = build_paraphrases(fused, pairs)
    backlog = fused.embedding_backlog()
    report = fused.embed_pending()
    assert report is not None
    print(
        f"embedded {report.embedded} lines in {report.seconds:.1f} s: {report.embedded / report.seconds:.0f} lines/s "
        f"(backlog at start {backlog}; model {embedder.model_id})"
    )
    tuning = [data[i] for i in range(5)]
    if args.sweep:
        sweep(fused, lexical, tuning, where, pairs, para_where)
        return
    print(f"fusion: MEANING_WEIGHT {search.MEANING_WEIGHT}, SIMILARITY_FLOOR {search.SIMILARITY_FLOOR}")
    for name, subset in sqlite_locomo.SPLITS.items():
        chosen = [data[i] for i in subset]
        lex, questions, _ = sqlite_locomo.evaluate(lexical, chosen, where)
        fus, _, _ = sqlite_locomo.evaluate(fused, chosen, where)
        print(
            f"LoCoMo {name}, {questions} questions: lexical R@5 {lex[5]:.3f} R@10 {lex[10]:.3f}; "
            f"fused R@5 {fus[5]:.3f} R@10 {fus[10]:.3f}"
        )
    for split in ("tune", "heldout"):
        lex_p = evaluate_paraphrases(lexical, pairs, para_where, split)
        fus_p = evaluate_paraphrases(fused, pairs, para_where, split)
        print(
            f"paraphrase {split}: lexical R@1 {lex_p['R@1']:.3f} R@5 {lex_p['R@5']:.3f}; "
            f"fused R@1 {fus_p['R@1']:.3f} R@5 {fus_p['R@5']:.3f}"
        )
    # The paraphrase set on the providers that keep their own vectors, each with the same embedder.
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, settings in (("sqlite", {"path": f"{tmp}/p.db"}), ("local-disk", {"root": f"{tmp}/ld"})):
            if name not in memvault.registry.get_registry().names():
                continue
            other = memvault.open(name, embedder=embedder, background_embedding=False, **settings)
            if other.embedding is None:
                print(f"paraphrase on {name}: keeps no vectors (by words only)")
                other.close()
                continue
            where_other = build_paraphrases(other, pairs)
            other.embed_pending()
            for split in ("tune", "heldout"):
                got = evaluate_paraphrases(other, pairs, where_other, split)
                print(f"paraphrase {split} on {name}: R@1 {got['R@1']:.3f} R@5 {got['R@5']:.3f}")
            other.close()
    # Latency, alternating the two in rounds so machine noise falls on both alike.
    lex_times: list[float] = []
    fus_times: list[float] = []
    for _ in range(3):
        lex_times += timed_recalls(lexical, tuning, fresh_vectors=False)
        fus_times += timed_recalls(fused, tuning, fresh_vectors=True)
    lex_p50, fus_p50 = statistics.median(lex_times), statistics.median(fus_times)
    print(
        f"recall p50 on LoCoMo 0-4 ({len(lex_times)} recalls each): lexical {lex_p50 * 1e3:.2f} ms, "
        f"fused {fus_p50 * 1e3:.2f} ms (query embedded each time): {fus_p50 / lex_p50:.2f}x"
    )


if __name__ == "__main__":
    main()
