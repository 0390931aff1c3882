"""Layer 4 (beside the facade): a vault's recall by meaning (contract P36-P40).

:class:`Embedding` embeds a recall's query for the provider, and embeds new
lines off the write path: a background thread asks the provider for the lines
that have no vector of the embedder's model yet (``memvault_vectors_pending``),
embeds them in batches and stores the vectors (``memvault_vectors_store``).

The backlog lives in the provider's storage (a line is pending while it has no
vector of the model), not in a queue in memory: a crash, a restart or a full
backlog loses no work, and a writer never waits for the embedder (a retain is
as fast with meaning on as off). A recall meanwhile finds a line not yet
embedded by its words (P20 holds).

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from attrs import frozen

from memvault.contract.embedding import MAX_EMBED_BATCH, Embedder, QueryVector, vector_bytes
from memvault.contract.errors import MemvaultError, PluginError
from memvault.contract.forking import after_fork_in_child

__all__ = ["DEFAULT_BATCH", "DEFAULT_POLL_SECONDS", "DrainReport", "Embedding"]

log = logging.getLogger("memvault.embedding")

#: Lines embedded per batch in the background (one onnxruntime run for the default embedder).
DEFAULT_BATCH: Final = 32
#: How often an idle worker looks for lines other processes wrote (seconds); a write
#: through this vault wakes it at once.
DEFAULT_POLL_SECONDS: Final = 2.0
#: Queries whose vectors a vault keeps (an agent asks the same thing again within a turn).
_QUERY_CACHE: Final = 256


#: Every live worker, stopped before the interpreter exits: a daemon thread still inside the embedder's
#: native code while the interpreter tears down aborts the process (onnxruntime: "terminate called
#: without an active exception", exit 134), so a script that never closes its vault must not crash.
_LIVE: weakref.WeakSet[Embedding] = weakref.WeakSet()


@atexit.register
def _stop_every_worker() -> None:
    for embedding in list(_LIVE):
        embedding.close(timeout=10.0)


@frozen(kw_only=True)
class DrainReport:
    """What :meth:`Embedding.drain` did: lines embedded, the backlog left, seconds taken."""

    embedded: int
    backlog: int
    seconds: float
    model_id: str


class Embedding:
    """One vault's embedder and its background worker.

    :param hook: the vault's hook relay (``memvault_vectors_*``).
    :param embedder: the embedder; shared between vaults, thread-safe.
    :param provider: the provider's name, for messages.
    :param background: start the worker thread (off: only :meth:`drain` embeds lines).
    """

    def __init__(
        self,
        hook: Any,
        embedder: Embedder,
        *,
        provider: str,
        background: bool = True,
        batch: int = DEFAULT_BATCH,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self._hook = hook
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.provider = provider
        self.batch = max(1, min(int(batch), MAX_EMBED_BATCH))
        self.poll_seconds = poll_seconds
        self._background = background
        self._queries: OrderedDict[str, QueryVector] = OrderedDict()
        self._new_state()
        after_fork_in_child(self, type(self)._forked)
        if background:
            self._start()

    def _new_state(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._step_lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failures = 0

    def _forked(self) -> None:
        # The worker thread does not exist in a forked child (P35): new events and locks, a new thread.
        self._new_state()
        if self._background:
            self._start()

    def _start(self) -> None:
        _LIVE.add(self)
        self._thread = threading.Thread(target=self._run, name=f"memvault-embed-{self.provider}", daemon=True)
        self._thread.start()

    # -- recall ----------------------------------------------------------------

    def query_vector(self, query: str) -> QueryVector:
        """The vector of a recall's query (cached for the last few queries)."""
        with self._query_lock:
            found = self._queries.get(query)
            if found is not None:
                self._queries.move_to_end(query)
                return found
        values = self._embed([query])[0]
        vector = QueryVector(model_id=self.model_id, values=values)
        with self._query_lock:
            self._queries[query] = vector
            while len(self._queries) > _QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def _embed(self, texts: list[str]) -> Any:
        import numpy as np

        try:
            vectors = self.embedder.embed(texts)
        except MemvaultError:
            raise
        except Exception as exc:
            raise PluginError(f"embedder {self.embedder.name!r} failed: {type(exc).__name__}: {exc}") from exc
        array = np.asarray(vectors, dtype=np.float32)
        if array.shape != (len(texts), self.embedder.dimensions):
            raise PluginError(
                f"embedder {self.embedder.name!r} returned vectors of shape {array.shape}, "
                f"expected {(len(texts), self.embedder.dimensions)}"
            )
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise PluginError(f"embedder {self.embedder.name!r} returned a zero or non-finite vector")
        return array / norms  # unit length whatever the embedder's rounding

    # -- the backlog -----------------------------------------------------------

    def notify(self) -> None:
        """A write happened through this vault: the worker looks for new lines now."""
        self._wake.set()

    def backlog(self) -> int:
        """How many lines wait for a vector of this model (asks the provider)."""
        return int(self._hook.memvault_vectors_backlog(model_id=self.model_id) or 0)

    def step(self) -> int:
        """Embed one batch of pending lines and store their vectors; how many were pending."""
        with self._step_lock:
            pending = self._hook.memvault_vectors_pending(model_id=self.model_id, limit=self.batch) or []
            if not pending:
                return 0
            vectors = self._embed([line.text for line in pending])
            items = [(line.key, vector_bytes(vector)) for line, vector in zip(pending, vectors, strict=True)]
            self._hook.memvault_vectors_store(model_id=self.model_id, vectors=items)
            return len(pending)

    def drain(self, *, timeout: float | None = None, progress: Callable[[int, int], None] | None = None) -> DrainReport:
        """Embed every pending line now, in this thread (``memvault reembed``, tests).

        Resumable: what was stored before an interruption stays stored, and the next
        drain starts with what is left.

        :param timeout: stop after this many seconds (``None``: until nothing is pending).
        :param progress: called with ``(embedded so far, backlog at the start)`` after each batch.
        """
        started = time.monotonic()
        total = self.backlog()
        done = 0
        while timeout is None or time.monotonic() - started < timeout:
            stepped = self.step()
            if not stepped:
                break
            done += stepped
            if progress is not None:
                progress(done, max(total, done))
        return DrainReport(
            embedded=done, backlog=self.backlog(), seconds=time.monotonic() - started, model_id=self.model_id
        )

    def _run(self) -> None:
        stop, wake = self._stop, self._wake
        while not stop.is_set():
            try:
                while not stop.is_set() and self.step():
                    pass
                self._failures = 0
            except Exception as exc:  # noqa: BLE001 - the worker reports and retries, it never dies
                self._failures += 1
                if self._failures in (1, 10) or self._failures % 100 == 0:
                    log.warning(
                        "embedding new lines of provider %r failed (%d in a row; retrying, they are found "
                        "by their words meanwhile): %s: %s",
                        self.provider,
                        self._failures,
                        type(exc).__name__,
                        exc,
                    )
                stop.wait(min(60.0, self.poll_seconds * 2 ** min(self._failures, 5)))
                continue
            wake.wait(self.poll_seconds)
            wake.clear()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker after its current batch (the rest stays pending, durably)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
