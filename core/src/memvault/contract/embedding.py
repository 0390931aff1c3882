"""Layer 1: recall by meaning, what crosses the hooks (contract P36-P40).

An *embedder* turns texts into unit vectors (``memvault_register_embedders``
registers one, like a scanner). A provider that declares the capability
``vectors`` keeps one vector per indexed line beside the line, in its own
storage, and answers three optional hooks: the lines still waiting for a
vector of a model (:class:`PendingLine`), storing vectors for them, and how
many wait. A recall whose vault embeds the query carries a
:class:`QueryVector` (``RecallRequest.vector``); the provider scores its lines
by cosine inside the request's partitions and fuses that with its lexical
ranking through :func:`memvault.search.fuse`, the one fusion every provider uses.

Vectors are stored as little-endian float16 (:func:`vector_bytes`): half the
disk of float32, with a cosine error far below what changes a ranking.

numpy is imported only when a vector is built or read, so ``import memvault``
does not pay for it.

May import: :mod:`memvault.contract.errors`.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from attrs import field, frozen

from memvault.contract.errors import InvalidRequest

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
else:
    Vectors = Any

__all__ = [
    "MAX_EMBED_BATCH",
    "MODEL_ID_MAX",
    "Embedder",
    "PendingLine",
    "QueryVector",
    "RegisterEmbedder",
    "line_digest",
    "vector_bytes",
    "vectors_from_bytes",
]

#: At most this many texts in one call of :meth:`Embedder.embed` from the core.
MAX_EMBED_BATCH: Final = 64
#: A model id is 1-200 printable ASCII characters (it is stored beside every vector).
MODEL_ID_MAX: Final = 200


@runtime_checkable
class Embedder(Protocol):
    """A text embedder. Registered by ``memvault_register_embedders``; thread-safe.

    ``model_id`` names the exact weights and settings (anything that would change a
    vector changes it): every stored vector carries it, and a provider never compares
    vectors of two models (contract P38).
    """

    name: str
    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts``: a float32 array of shape ``(len(texts), dimensions)``,
        each row of unit length (L2), in the order of ``texts``."""


class RegisterEmbedder(Protocol):
    """The callback passed to ``memvault_register_embedders``."""

    def __call__(self, name: str, factory: Callable[..., Embedder], *, description: str = "") -> None:
        """Record one embedder.

        :param name: the name ``[embed] embedder = "NAME"`` selects it by (``[a-z][a-z0-9_-]*``).
        :param factory: called with the ``[embed]`` table's other keys as keyword
            arguments; returns the embedder. Called at most once per process and settings:
            the registry shares the instance between vaults.
        :param description: one line for ``memvault embedders``.
        """


def _model_id(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MODEL_ID_MAX or not value.isascii():
        raise InvalidRequest(f"model_id must be 1-{MODEL_ID_MAX} ASCII characters, got {value!r}", field="model_id")
    if not value.isprintable():
        raise InvalidRequest("model_id must be printable ASCII", field="model_id")


def _unit_vector(instance: object, attribute: Any, value: Any) -> None:
    import numpy as np

    if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype != np.float32 or value.size == 0:
        raise InvalidRequest("a query vector is a non-empty 1-D float32 numpy array", field="vector")
    norm = float(np.linalg.norm(value))
    if not math.isfinite(norm) or abs(norm - 1.0) > 1e-3:
        raise InvalidRequest(f"a query vector must have unit length, got {norm!r}", field="vector")


@frozen(kw_only=True)
class QueryVector:
    """A recall's query as a vector of ``model_id`` (set by the vault, never by a remote caller)."""

    model_id: str = field(validator=_model_id)
    values: Vectors = field(eq=False, repr=False, validator=_unit_vector)

    @property
    def dimensions(self) -> int:
        return int(self.values.shape[0])


@frozen(kw_only=True)
class PendingLine:
    """One indexed line that has no vector of the model asked for yet.

    ``key`` is the provider's own name for the line as it is now (its document, its
    number and :func:`line_digest` of its text): storing a vector under a key whose
    line has changed or gone since stores nothing, so a slow embedder never attaches
    a vector to text it did not embed (contract P37).
    """

    key: str
    text: str


@functools.lru_cache(maxsize=1 << 16)  # a provider asks again for the lines it holds
def line_digest(text: str) -> str:
    """A short digest of a line's text, for vector keys (not a security boundary: it names
    which text a vector was computed from; 16 hex characters of sha256)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def vector_bytes(values: Vectors) -> bytes:
    """One vector as stored: little-endian float16."""
    import numpy as np

    return np.asarray(values, dtype="<f2").tobytes()


def vectors_from_bytes(blobs: Sequence[bytes], dimensions: int) -> Vectors:
    """Stored vectors (:func:`vector_bytes`) as one float32 array of shape ``(len(blobs), dimensions)``.

    A blob of another size (a vector of another model, a torn write) raises ``ValueError``:
    the caller keeps only vectors of the query's model, so this never mixes models.
    """
    import numpy as np

    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    size = 2 * dimensions
    for blob in blobs:
        if len(blob) != size:
            raise ValueError(f"a stored vector has {len(blob)} bytes, expected {size}")
    joined = b"".join(blobs)
    return np.frombuffer(joined, dtype="<f2").astype(np.float32).reshape(len(blobs), dimensions)
