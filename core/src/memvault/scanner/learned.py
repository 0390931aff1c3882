"""Layer 5: the scanner's trained classifiers (issue 36), shipped as weights.

Two small models trained by ``core/scripts/build_scan_classifier.py`` on the
scanner's training data (the tuning corpus and ``core/tests/data/scan_train_*.jsonl``:
attacks of five categories and benign look-alikes in 24 languages; never
the held-out sets), each a softmax regression over ``benign`` and the categories:

- :class:`CharModel` reads hashed character n-grams (3 and 4 characters of the
  text, case-folded and NFKC-normalised): no embedder needed, every language
  with a script, cheap enough (a few numpy operations a window) to run where
  the rules and the sentence model are blind.
- :class:`HeadModel` reads the sentence embedding the check by meaning already
  computed for a window (the default embedder's model only).

A window is an attack of a category when the probability of that category
reaches the category's threshold: chosen at build time on out-of-fold scores
so that no benign training text the rules store reached it (with a margin).
The head's verdict is on the mean of its probabilities and the char model's.

May import: :mod:`memvault.contract` and :mod:`memvault.scanner.engine`.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from collections.abc import Sequence
from importlib import resources
from typing import Any, Final

from attrs import frozen

__all__ = ["CharModel", "HeadModel", "char_features", "load_char_model", "load_head_model"]

#: Character n-gram lengths the char model hashes.
NGRAMS: Final = (3, 4)
_PRIME: Final = 0x100000001B3  # FNV-1a's 64-bit prime
_FMIX: Final = 0xFF51AFD7ED558CCD  # murmur3's fmix64 multiplier
_SEEDS: Final = {n: 0xCBF29CE484222325 ^ (n * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF) for n in range(1, 7)}


def normalise(text: str) -> str:
    """The text the char model reads: NFKC, case-folded, runs of whitespace as one space, padded."""
    return " " + " ".join(unicodedata.normalize("NFKC", text).casefold().split()) + " "


def _hashed(codes: Any, bits: int) -> list[tuple[int, Any]]:
    """Per n-gram length: the bucket of the n-gram starting at each position of ``codes`` (uint64 code points)."""
    import numpy as np

    prime = np.uint64(_PRIME)
    shift = np.uint64(64 - bits)
    out = []
    with np.errstate(over="ignore"):
        for n in NGRAMS:
            width = len(codes) - n + 1
            if width <= 0:
                continue
            h = (np.uint64(_SEEDS[n]) ^ codes[:width]) * prime
            for k in range(1, n):
                h = (h ^ codes[k : k + width]) * prime
            # FNV's high bits mix poorly for short inputs (107,021 n-grams filled 43,719 of 2**17 buckets,
            # against 73,142 at random): murmur3's 64-bit finaliser spreads them.
            h ^= h >> np.uint64(33)
            h *= np.uint64(_FMIX)
            h ^= h >> np.uint64(33)
            out.append((n, h >> shift))
    return out


def _codes(text: str) -> Any:
    import numpy as np

    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)


def char_features(text: str, bits: int) -> tuple[Any, float]:
    """The buckets of ``text``'s character n-grams, each once, and the value each adds: one over the square
    root of their number (a text's features have unit length, so a run of one repeated n-gram weighs no
    more than the n-gram once)."""
    import numpy as np

    parts = [buckets for _, buckets in _hashed(_codes(normalise(text)), bits)]
    if not parts:
        return np.zeros(0, dtype=np.int64), 0.0
    buckets = np.unique(np.concatenate(parts)).astype(np.int64)
    return buckets, 1.0 / float(np.sqrt(len(buckets)))


@frozen(kw_only=True)
class CharModel:
    """Softmax regression over hashed character n-grams."""

    bits: int
    classes: tuple[str, ...]  # "benign" first, then the categories
    weights: Any  # float32, (2**bits, len(classes))
    bias: Any  # float32, (len(classes),)
    threshold: float
    #: Per attack category (``classes[1:]``): a window is of that category when its probability reaches the
    #: category's threshold. ``None``: one threshold, :attr:`threshold`, on one minus benign's probability.
    thresholds: tuple[float, ...] | None = None

    def probabilities(self, text: str) -> Any:
        """The model's probability of each class for ``text``."""
        import numpy as np

        buckets, value = char_features(text, self.bits)
        logits = self.bias + value * self.weights[buckets].sum(axis=0)
        logits = logits - logits.max()
        exp = np.exp(logits)
        return exp / exp.sum()

    def verdict(self, text: str) -> tuple[str, float] | None:
        """(category, probability of an attack) when that probability reaches the threshold."""
        return _verdict(self.classes, self.probabilities(text), self.threshold, self.thresholds)

    def batch_probabilities(self, texts: Sequence[str]) -> Any:
        """:meth:`probabilities` of many texts at once, in a few numpy passes over all their characters
        (a long write's windows cost one sort, not a Python loop each): rows in the order of ``texts``."""
        import numpy as np

        normalised = [normalise(text) for text in texts]
        codes = _codes("".join(normalised))
        owner = np.repeat(np.arange(len(texts), dtype=np.uint64), [len(t) for t in normalised])
        keys = []
        for n, buckets in _hashed(codes, self.bits):
            # An n-gram counts for a text when it starts and ends in it: (text << bits) | bucket, each once.
            starts = owner[: len(buckets)]
            inside = starts == owner[n - 1 : n - 1 + len(buckets)]
            keys.append((starts[inside] << np.uint64(self.bits)) | buckets[inside])
        unique = np.sort(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.uint64)
        # Each key once (a sort and a comparison: numpy's hash-based unique is several times slower here).
        unique = unique[np.concatenate(([True], unique[1:] != unique[:-1]))] if len(unique) else unique
        rows = (unique >> np.uint64(self.bits)).astype(np.int64)
        contributions = self.weights[(unique & np.uint64((1 << self.bits) - 1)).astype(np.int64)]
        counts = np.bincount(rows, minlength=len(texts)).astype(np.float64)
        logits = np.stack(
            [np.bincount(rows, weights=contributions[:, c], minlength=len(texts)) for c in range(len(self.classes))],
            axis=1,
        )
        logits = logits / np.sqrt(np.maximum(counts, 1.0))[:, None] + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def verdicts(self, texts: Sequence[str]) -> list[tuple[str, float] | None]:
        """:meth:`verdict` of many texts at once (:meth:`batch_probabilities`)."""
        if not texts:
            return []
        return [_verdict(self.classes, row, self.threshold, self.thresholds) for row in self.batch_probabilities(texts)]


@frozen(kw_only=True)
class HeadModel:
    """Softmax regression over a window's sentence embedding (one embedding model)."""

    model_id: str
    classes: tuple[str, ...]
    weights: Any  # float32, (dimensions, len(classes))
    bias: Any
    threshold: float
    #: Per attack category, as :attr:`CharModel.thresholds`.
    thresholds: tuple[float, ...] | None = None
    #: The verdict is on the mean of this head's probabilities and the char model's (the two models err on
    #: different texts: out of fold, together they catch more at the same false positives than either).
    blend_chars: bool = False

    def probabilities(self, vectors: Any) -> Any:
        """Per row of unit ``vectors`` (n, dimensions): the probability of each class."""
        import numpy as np

        logits = vectors @ self.weights + self.bias
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)


def _verdict(
    classes: tuple[str, ...], probabilities: Any, threshold: float, thresholds: tuple[float, ...] | None = None
) -> tuple[str, float] | None:
    """The verdict on one row of probabilities (benign first), or ``None``.

    With ``thresholds`` (one per attack category): the most probable of the categories whose probability
    reaches its own threshold. Without: the most probable category, when the probability of an attack (one
    minus benign's) reaches ``threshold``."""
    if thresholds is not None:
        over = [(float(probabilities[c]), c) for c in range(1, len(classes)) if probabilities[c] >= thresholds[c - 1]]
        if not over:
            return None
        probability, best = max(over)
        return classes[best], probability
    attack = 1.0 - float(probabilities[0])
    if attack < threshold:
        return None
    return classes[1 + int(probabilities[1:].argmax())], attack


def head_verdict(model: HeadModel, probabilities: Any) -> tuple[str, float] | None:
    """(category, probability) for one row of :meth:`HeadModel.probabilities` (blended with the char model's
    when :attr:`HeadModel.blend_chars`), or ``None``."""
    return _verdict(model.classes, probabilities, model.threshold, model.thresholds)


def _thresholds(index: dict[str, Any], classes: int) -> tuple[float, ...] | None:
    values = index.get("thresholds")
    if values is None:
        return None
    if len(values) != classes - 1:
        raise ValueError(f"classifier.json holds {len(values)} thresholds for {classes - 1} attack categories")
    return tuple(float(v) for v in values)


def _shipped(model: str) -> tuple[dict[str, Any], Any, Any]:
    """``model``'s entry of ``classifier.json`` and its weights and bias (float32) from ``<model>.npz``."""
    import numpy as np

    folder = resources.files("memvault.scanner") / "data" / "classifier"
    index: dict[str, Any] = json.loads((folder / "classifier.json").read_text(encoding="utf-8"))[model]
    with resources.as_file(folder / f"{model}.npz") as path, np.load(path, allow_pickle=False) as data:
        weights = data["weights"].astype(np.float32)
        bias = data["bias"].astype(np.float32)
    if weights.shape[1:] != (len(index["classes"]),) or bias.shape != (len(index["classes"]),):
        raise ValueError(f"{model}.npz holds weights of shape {weights.shape}, classifier.json describes another")
    return index, weights, bias


@functools.cache
def load_char_model() -> CharModel:
    """The shipped char model (read once per process)."""
    index, weights, bias = _shipped("char")
    if weights.shape[0] != 1 << index["bits"]:
        raise ValueError(f"char.npz holds {weights.shape[0]} buckets, classifier.json says 2**{index['bits']}")
    return CharModel(
        bits=int(index["bits"]),
        classes=tuple(index["classes"]),
        weights=weights,
        bias=bias,
        threshold=float(index["threshold"]),
        thresholds=_thresholds(index, len(index["classes"])),
    )


@functools.cache
def load_head_model() -> HeadModel:
    """The shipped embedding head (read once per process)."""
    index, weights, bias = _shipped("head")
    return HeadModel(
        model_id=str(index["model_id"]),
        classes=tuple(index["classes"]),
        weights=weights,
        bias=bias,
        threshold=float(index["threshold"]),
        thresholds=_thresholds(index, len(index["classes"])),
        blend_chars=bool(index.get("blend_chars", False)),
    )
