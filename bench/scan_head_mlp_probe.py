"""Would a head with a hidden layer separate attacks from look-alikes better than the linear head? (#36)

A measurement, nothing shipped changes: the scanner's head over all-MiniLM-L6-v2 sentence vectors of the
training texts read as English, trained 5-fold out of fold as ``core/scripts/build_scan_classifier.py``
trains the linear head (same folds, weights, thresholds: the highest out-of-fold probability of each
category given to a benign text the rules store, plus the margin), against one-hidden-layer ReLU heads of
a few sizes and penalties, alone and averaged with the linear head. Prints the build script's report for
each (per category, and with the rules). Needs the dev install with memvault-embed-minilm.

    python bench/scan_head_mlp_probe.py

Measured 2026-12-04 (2-core VM): the linear head alone 619 of 1,536 with the rules; hidden layers 564 to
614 alone, 621 to 644 averaged with the linear head; no benign text the rules store rejected by the
averaged heads, 0 to 3 by the hidden-layer heads alone.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _build_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "build_scan_classifier", ROOT / "core/scripts/build_scan_classifier.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_mlp(
    b: Any, x: Any, y: Any, weights: Any, hidden: int, l2: float, steps: int, lr: float = 0.01
) -> Callable[[Any], Any]:
    """A one-hidden-layer softmax classifier, full-batch Adam; returns its probabilities function."""
    rng = np.random.default_rng(0)
    classes = len(b.CLASSES)
    params = [
        (rng.standard_normal((x.shape[1], hidden)) * np.sqrt(2 / x.shape[1])).astype(np.float32),
        np.zeros(hidden, np.float32),
        (rng.standard_normal((hidden, classes)) * np.sqrt(1 / hidden)).astype(np.float32),
        np.zeros(classes, np.float32),
    ]
    first = [np.zeros_like(p) for p in params]
    second = [np.zeros_like(p) for p in params]
    onehot = np.eye(classes, dtype=np.float32)[y]
    total = float(weights.sum())
    for t in range(1, steps + 1):
        w1, b1, w2, b2 = params
        h = np.maximum(x @ w1 + b1, 0)
        delta = (b.softmax(h @ w2 + b2) - onehot) * (weights / total)[:, None]
        back = (delta @ w2.T) * (h > 0)
        grads = [x.T @ back + l2 * w1, back.sum(0), h.T @ delta + l2 * w2, delta.sum(0)]
        for i, g in enumerate(grads):
            first[i] = 0.9 * first[i] + 0.1 * g
            second[i] = 0.999 * second[i] + 0.001 * g * g
            params[i] -= lr * (first[i] / (1 - 0.9**t)) / (np.sqrt(second[i] / (1 - 0.999**t)) + 1e-8)
    w1, b1, w2, b2 = params
    return lambda z: b.softmax(np.maximum(z @ w1 + b1, 0) @ w2 + b2)


def main() -> None:
    sys.path.insert(0, str(ROOT / "core" / "src"))
    from memvault.registry import get_registry
    from memvault.scanner.engine import scan
    from memvault.scanner.semantic import english

    b = _build_script()
    data = b.rows()
    labels = np.array([b.CLASSES.index(c) for c, _, _ in data])
    weights = np.where(labels == 0, b.BENIGN_WEIGHT, 1.0).astype(np.float32)
    by_rules = np.array([scan(text) is not None for _, _, text in data])
    rows = np.flatnonzero(np.array([english(text) for _, _, text in data]))
    x = np.asarray(get_registry().embedder("minilm").embed([data[i][2] for i in rows]), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y, w, rules = labels[rows], weights[rows], by_rules[rows]
    fold = b.folds(len(rows))
    linear = np.zeros((len(rows), len(b.CLASSES)), np.float32)
    for k in range(b.FOLDS):
        train = fold != k
        lw, lb = b.train_dense(x[train], y[train], w[train], 1e-4)
        linear[~train] = b.softmax(x[~train] @ lw + lb)
    b.class_thresholds("linear head", y, linear, rules)
    for hidden, l2, steps in ((256, 1e-4, 500), (256, 1e-3, 500), (512, 1e-4, 800)):
        oof = np.zeros_like(linear)
        for k in range(b.FOLDS):
            train = fold != k
            oof[~train] = train_mlp(b, x[train], y[train], w[train], hidden, l2, steps)(x[~train])
        b.class_thresholds(f"hidden layer {hidden}, l2 {l2}, {steps} steps", y, oof, rules)
        b.class_thresholds("  averaged with the linear head", y, (oof + linear) / 2, rules)


if __name__ == "__main__":
    main()
