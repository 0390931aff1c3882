"""Rebuild ``memvault/scanner/data/intents/`` from the tuning corpus and the default embedder.

The scanner's check by meaning (:mod:`memvault.scanner.semantic`) compares what
is written with known attack intents. They are the tuning corpus's plain attacks
(``core/tests/scan_corpus.py``'s ``ATTACKS``, every category but
``invisible_unicode``, which is a matter of characters, not meaning, and its
``PARAPHRASES``) and its benign look-alikes (``BENIGN`` and ``BENIGN_NEAR``,
the anchors a text must be farther from),
embedded with the default embedder (``memvault-embed-minilm``). Only the vectors
and an index ship in the wheel: ``intents.npy`` (float16, one row per text, in
the index's order) and ``intents.json`` (model id, dimensions, per row its
category or ``benign`` and the sha256 of its text, and the sha256 of the whole
selection). ``core/tests/test_scan_semantic.py`` fails when the shipped data no
longer matches what this script builds from the current corpus and model.

    .venv/bin/python core/scripts/build_scan_intents.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[1]
OUT = CORE / "src" / "memvault" / "scanner" / "data" / "intents"


def selection() -> list[tuple[str, str]]:
    """(category or "benign", text) for every row, in the shipped order."""
    sys.path.insert(0, str(CORE / "tests"))
    try:
        import scan_corpus
    finally:
        sys.path.remove(str(CORE / "tests"))
    rows = [
        (category, text)
        for category, texts in scan_corpus.ATTACKS.items()
        if category != scan_corpus.INVISIBLE
        for text in texts
    ]
    rows += [(category, text) for category, texts in scan_corpus.PARAPHRASES.items() for text in texts]
    rows += [("benign", text) for text in [*scan_corpus.BENIGN, *scan_corpus.BENIGN_NEAR]]
    return rows


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def corpus_sha256(rows: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8")).hexdigest()


def build(embedder: object = None) -> tuple[dict[str, object], object]:
    """The index and the float16 vectors this script writes."""
    import numpy as np

    if embedder is None:
        # The default embedder (memvault-embed-minilm), found the way a vault finds it: by its registered name.
        from memvault.registry import get_registry

        embedder = get_registry().embedder("minilm")
    rows = selection()
    vectors = np.asarray(embedder.embed([text for _, text in rows]), dtype=np.float32)  # type: ignore[attr-defined]
    index = {
        "model_id": embedder.model_id,  # type: ignore[attr-defined]
        "dimensions": int(vectors.shape[1]),
        "corpus_sha256": corpus_sha256(rows),
        "rows": [{"category": category, "sha256": text_sha256(text)} for category, text in rows],
    }
    return index, vectors.astype("<f2")


def main() -> None:
    import numpy as np

    index, vectors = build()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = index.pop("rows")
    header = json.dumps(index)[:-1]  # one row a line: a corpus change reads as a short diff
    body = ",\n".join(json.dumps(row) for row in rows)  # type: ignore[attr-defined]
    (OUT / "intents.json").write_text(f'{header}, "rows": [\n{body}\n]}}\n', encoding="utf-8")
    np.save(OUT / "intents.npy", vectors, allow_pickle=False)
    print(f"{len(rows)} rows ({index['model_id']}) written to {OUT}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
