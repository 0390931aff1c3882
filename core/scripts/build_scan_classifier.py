"""Train the scanner's classifiers and write ``memvault/scanner/data/classifier/`` (issue 36).

Data (never the held-out set, the newest ``scan_heldout_v*.jsonl``, nor LoCoMo,
which only checks the result): the tuning corpus (``core/tests/scan_corpus.py``:
its plain attacks but the invisible-Unicode ones, its paraphrases, its benign
texts and look-alikes), the training files ``core/tests/data/scan_train_*.jsonl``
and the :data:`RETIRED` held-out sets: measured and reported as held-out sets
first, then taken as training data once a newer set was written to measure by.

Two softmax regressions over ``benign`` and the five categories, trained with
full-batch Adam and an L2 penalty, benign texts weighted up:

- the char model over hashed character 3- and 4-grams (every text; the
  scanner gives it the windows the sentence model cannot read, so its
  threshold and figures are taken over those texts);
- the head over the default embedder's sentence vectors (the texts read as English).

Each model's thresholds, one per category, come from 5-fold out-of-fold
scores: the probability of that category all but :data:`BENIGN_ABOVE` of
the benign training texts the rules store stay below, plus :data:`MARGIN`,
so that at most that many such look-alikes per category would have been
rejected by a model not trained on them. The head's verdict is
on the mean of its probabilities and the char model's (thresholds taken on
that mean). The script prints the out-of-fold recall per category at those
thresholds (and, for reference, at the single threshold of earlier
releases, on one minus benign's probability, still written as ``threshold``).

    python core/scripts/build_scan_classifier.py [--check]

``--check`` trains and reports without writing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

CORE = Path(__file__).resolve().parents[1]
OUT = CORE / "src" / "memvault" / "scanner" / "data" / "classifier"
DATA = CORE / "tests" / "data"
CLASSES = ("benign", "instruction_override", "role_hijack", "exfiltration", "forged_tool_call", "addressed_to_model")
BITS = 17
#: Added to the highest out-of-fold benign score to make a threshold.
MARGIN = 0.03
#: Benign texts count this many times an attack in the loss: a false rejection loses a user's memory.
BENIGN_WEIGHT = 3.0
FOLDS = 5
SEED = 36
#: Held-out sets retired into the training data, each after it was measured and reported and a newer set
#: was written (``scan_heldout_v12.jsonl`` is held out: never read here). v10 and v11 were retired after v12 was
#: written, under a rule fixed before (keep only if v12's attacks rise and its benign rejections do not): 84 -> 85
#: attacks, the same 8 benign items, LoCoMo 0.
RETIRED = tuple(f"scan_heldout_v{n}.jsonl" for n in range(2, 12))
#: Per attack category, how many of the benign texts the rules store may score at or above the category's
#: threshold out of fold: the threshold sits :data:`MARGIN` above the next one. With 0, one look-alike's outlier
#: score set the threshold for the whole category; with 1, chosen on v8 before it was retired (v9 held out),
#: out of fold 3 of 1,287 benign texts the char model judges and 3 of 1,955 the blend judges are rejected, for
#: 64 and 99 more attacks, and v8 rejected 4 more attacks and no more benign items.
BENIGN_ABOVE = 1


def rows() -> list[tuple[str, str, str]]:
    """(class, language, text) for every training text, in a stable order."""
    sys.path.insert(0, str(CORE / "tests"))
    try:
        import scan_corpus
    finally:
        sys.path.remove(str(CORE / "tests"))
    out = [
        (category, "en", text)
        for category, texts in scan_corpus.ATTACKS.items()
        if category != scan_corpus.INVISIBLE
        for text in texts
    ]
    out += [(category, "en", text) for category, texts in scan_corpus.PARAPHRASES.items() for text in texts]
    out += [("benign", "en", text) for text in [*scan_corpus.BENIGN, *scan_corpus.BENIGN_NEAR]]
    for path in [*sorted(DATA.glob("scan_train_*.jsonl")), *(DATA / name for name in RETIRED)]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            category = item["category"] if item["attack"] else "benign"
            if category not in CLASSES:
                continue
            out.append((category, item["lang"], item["text"]))
    return out


def training_sha256(data: list[tuple[str, str, str]]) -> str:
    """The digest of the training rows, recorded with the weights (a test checks the shipped ones are current)."""
    return hashlib.sha256(json.dumps(data, ensure_ascii=False).encode("utf-8")).hexdigest()


def softmax(logits: Any) -> Any:
    logits = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)


class Adam:
    """Adam's updates of a weight matrix and a bias, in place (learning rate 0.05)."""

    def __init__(self, w: Any, b: Any, lr: float = 0.05, beta1: float = 0.9, beta2: float = 0.999) -> None:
        self.params = (w, b)
        self.moments = [(np.zeros_like(p), np.zeros_like(p)) for p in self.params]
        self.lr, self.beta1, self.beta2 = lr, beta1, beta2
        self.t = 0

    def step(self, grad_w: Any, grad_b: Any) -> None:
        self.t += 1
        for p, g, (m, v) in zip(self.params, (grad_w, grad_b), self.moments, strict=True):
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            p -= self.lr * (m / (1 - self.beta1**self.t)) / (np.sqrt(v / (1 - self.beta2**self.t)) + 1e-8)


def train_sparse(
    indices: list[Any], values: list[Any], labels: Any, weights: Any, dims: int, l2: float, steps: int = 300
) -> tuple[Any, Any]:
    """Softmax regression over sparse rows, full-batch Adam."""
    lengths = np.array([len(i) for i in indices])
    row = np.repeat(np.arange(len(indices)), lengths)
    col = np.concatenate(indices)
    val = np.repeat(np.asarray(values, dtype=np.float32), lengths)
    classes = len(CLASSES)
    w = np.zeros((dims, classes), dtype=np.float32)
    b = np.zeros(classes, dtype=np.float32)
    adam = Adam(w, b)
    onehot = np.eye(classes, dtype=np.float32)[labels]
    total = float(weights.sum())
    for _ in range(steps):
        logits = np.zeros((len(indices), classes), dtype=np.float32)
        contrib = w[col] * val[:, None]
        for c in range(classes):
            logits[:, c] = np.bincount(row, weights=contrib[:, c], minlength=len(indices))
        logits += b
        delta = (softmax(logits) - onehot) * (weights / total)[:, None]
        grad_w = np.zeros_like(w)
        for c in range(classes):
            grad_w[:, c] = np.bincount(col, weights=val * delta[row, c], minlength=dims)
        grad_w += l2 * w
        adam.step(grad_w, delta.sum(axis=0))
    return w, b


def sparse_probabilities(w: Any, b: Any, indices: list[Any], values: list[Any]) -> Any:
    return softmax(np.stack([b + v * w[i].sum(axis=0) for i, v in zip(indices, values, strict=True)]))


def train_dense(x: Any, labels: Any, weights: Any, l2: float, steps: int = 400) -> tuple[Any, Any]:
    """Softmax regression over dense rows, full-batch Adam."""
    classes = len(CLASSES)
    w = np.zeros((x.shape[1], classes), dtype=np.float32)
    b = np.zeros(classes, dtype=np.float32)
    adam = Adam(w, b)
    onehot = np.eye(classes, dtype=np.float32)[labels]
    total = float(weights.sum())
    for _ in range(steps):
        delta = (softmax(x @ w + b) - onehot) * (weights / total)[:, None]
        adam.step(x.T @ delta + l2 * w, delta.sum(axis=0))
    return w, b


def attack_score(probabilities: Any) -> Any:
    """Per row: the probability that the text is an attack of any category (one minus benign's)."""
    return 1.0 - probabilities[:, 0]


def folds(n: int) -> Any:
    return np.random.default_rng(SEED).permutation(n) % FOLDS


def threshold_and_report(name: str, labels: Any, oof: Any, langs: list[str], by_rules: Any) -> float:
    """The threshold over the benign texts the rules store (one the rules reject is rejected either way),
    and the out-of-fold figures at it."""
    score = attack_score(oof)
    benign = labels == 0
    stored = benign & ~by_rules
    worst = float(score[stored].max()) if stored.any() else 0.0
    threshold = min(0.995, max(0.5, worst + MARGIN))
    caught = (score >= threshold) & ~benign
    print(
        f"{name}: threshold {threshold:.3f} (highest out-of-fold score of a benign text the rules store: "
        f"{worst:.3f}; the rules reject {int((benign & by_rules).sum())} of its {int(benign.sum())} benign texts)"
    )
    report(labels, caught, by_rules)
    english = np.array([lang == "en" for lang in langs])
    attacks = ~benign
    print(
        f"  all attacks {int(caught.sum())} / {int(attacks.sum())}; English {int(caught[english].sum())} / "
        f"{int((attacks & english).sum())}; other languages {int(caught[~english].sum())} / "
        f"{int((attacks & ~english).sum())}"
    )
    return threshold


def class_thresholds(name: str, labels: Any, probabilities: Any, by_rules: Any) -> list[float]:
    """Per attack category: the out-of-fold probability of that category that all but :data:`BENIGN_ABOVE` of the
    benign texts the rules store stay below, plus :data:`MARGIN` (a window is of a category when its probability
    reaches the category's threshold); and the out-of-fold figures at them."""
    benign = labels == 0
    stored = benign & ~by_rules
    thresholds = [
        min(0.995, max(0.25, float(np.sort(probabilities[stored, c])[-1 - BENIGN_ABOVE]) + MARGIN))
        if stored.sum() > BENIGN_ABOVE
        else 0.5
        for c in range(1, len(CLASSES))
    ]
    caught = np.zeros(len(labels), dtype=bool)
    for c in range(1, len(CLASSES)):
        caught |= probabilities[:, c] >= thresholds[c - 1]
    shown = ", ".join(f"{category} {t:.3f}" for category, t in zip(CLASSES[1:], thresholds, strict=True))
    print(f"{name}, a threshold per category: {shown}")
    report(labels, caught, by_rules, f"; benign the rules store and the model rejects: {int((caught & stored).sum())}")
    return thresholds


def report(labels: Any, caught: Any, by_rules: Any, more: str = "") -> None:
    """The out-of-fold figures of a model's verdicts ``caught``: per category, and with the rules."""
    for c, category in enumerate(CLASSES[1:], start=1):
        mask = labels == c
        print(f"  {category:22s} {int(caught[mask].sum()):4d} / {int(mask.sum()):4d}")
    attacks = labels != 0
    print(
        f"  with the rules: {int(((caught | by_rules) & attacks).sum())} / {int(attacks.sum())} "
        f"(the rules alone {int((by_rules & attacks).sum())}){more}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="train and report, write nothing")
    parser.add_argument("--l2", type=float, default=1e-4)
    parser.add_argument("--head-l2", type=float, default=1e-4)
    args = parser.parse_args()

    sys.path.insert(0, str(CORE / "src"))
    from memvault.scanner.learned import char_features

    data = rows()
    labels = np.array([CLASSES.index(c) for c, _, _ in data])
    langs = [lang for _, lang, _ in data]
    weights = np.where(labels == 0, BENIGN_WEIGHT, 1.0).astype(np.float32)
    print(f"{len(data)} texts: {int((labels > 0).sum())} attacks, {int((labels == 0).sum())} benign")
    from memvault.scanner.engine import scan

    by_rules = np.array([scan(text) is not None for _, _, text in data])

    # The char model judges the windows the sentence model cannot read (not English: another language, or
    # code and markup with few English words): trained on every text, its threshold and figures are taken
    # over the texts the scanner would send it.
    from memvault.scanner.semantic import english

    routed = [i for i, (_, _, text) in enumerate(data) if not english(text)]
    features = [char_features(text, BITS) for _, _, text in data]
    indices = [f[0] for f in features]
    values = [f[1] for f in features]
    fold = folds(len(data))
    oof = np.zeros((len(data), len(CLASSES)), dtype=np.float32)
    for k in range(FOLDS):
        train = np.flatnonzero(fold != k)
        test = np.flatnonzero(fold == k)
        w, b = train_sparse(
            [indices[i] for i in train], [values[i] for i in train], labels[train], weights[train], 1 << BITS, args.l2
        )
        oof[test] = sparse_probabilities(w, b, [indices[i] for i in test], [values[i] for i in test])
    print(f"char model: judges {len(routed)} of the texts (not read as English)")
    char_threshold = threshold_and_report(
        "char model", labels[routed], oof[routed], [langs[i] for i in routed], by_rules[routed]
    )
    char_thresholds = class_thresholds("char model", labels[routed], oof[routed], by_rules[routed])
    char_w, char_b = train_sparse(indices, values, labels, weights, 1 << BITS, args.l2)

    from memvault.registry import get_registry

    embedder = get_registry().embedder("minilm")
    english_rows = np.flatnonzero(np.array([english(text) for _, _, text in data]))
    x = np.asarray(embedder.embed([data[i][2] for i in english_rows]), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    head_labels = labels[english_rows]
    head_weights = weights[english_rows]
    head_fold = folds(len(english_rows))
    head_oof = np.zeros((len(english_rows), len(CLASSES)), dtype=np.float32)
    for k in range(FOLDS):
        train = head_fold != k
        w, b = train_dense(x[train], head_labels[train], head_weights[train], args.head_l2)
        head_oof[~train] = softmax(x[~train] @ w + b)
    head_threshold = threshold_and_report(
        "head", head_labels, head_oof, [langs[i] for i in english_rows], by_rules[english_rows]
    )
    # The head's verdict is on the mean of its probabilities and the char model's (both out of fold here).
    blend_thresholds = class_thresholds(
        "head and char model blended", head_labels, (head_oof + oof[english_rows]) / 2, by_rules[english_rows]
    )
    head_w, head_b = train_dense(x, head_labels, head_weights, args.head_l2)

    if args.check:
        return
    OUT.mkdir(parents=True, exist_ok=True)
    index = {
        "training_sha256": training_sha256(data),
        "texts": len(data),
        "char": {
            "bits": BITS,
            "classes": list(CLASSES),
            "threshold": round(char_threshold, 4),
            "thresholds": [round(t, 4) for t in char_thresholds],
        },
        "head": {
            "model_id": embedder.model_id,
            "classes": list(CLASSES),
            "threshold": round(head_threshold, 4),
            "thresholds": [round(t, 4) for t in blend_thresholds],
            "blend_chars": True,
        },
    }
    (OUT / "classifier.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    np.savez_compressed(OUT / "char.npz", weights=char_w.astype("<f2"), bias=char_b.astype("<f4"))
    np.savez_compressed(OUT / "head.npz", weights=head_w.astype("<f4"), bias=head_b.astype("<f4"))
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
