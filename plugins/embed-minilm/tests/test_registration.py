"""Installed, the distribution registers the embedder ``minilm`` through its entry point."""

from __future__ import annotations

import pytest

from memvault.errors import InvalidRequest
from memvault.registry import get_registry
from memvault_embed_minilm import MiniLMEmbedder


def test_the_entry_point_registers_minilm_with_a_description() -> None:
    registry = get_registry()
    assert "minilm" in registry.embedders
    _plugin, factory, description = registry.embedders["minilm"]
    assert factory is MiniLMEmbedder
    assert "all-MiniLM-L6-v2" in description
    assert any(dist == "memvault-embed-minilm" for _name, dist, _version in registry.loaded)


def test_the_registry_builds_it_from_embed_settings_and_shares_it() -> None:
    registry = get_registry()
    first = registry.embedder("minilm", {"threads": 2, "max_tokens": 128})
    assert isinstance(first, MiniLMEmbedder)
    assert (first.threads, first.max_tokens) == (2, 128)
    assert first.model_id.endswith("-max128")
    assert registry.embedder("minilm", {"max_tokens": 128, "threads": 2}) is first
    assert registry.embedder("minilm", {}) is not first
    assert registry.embedder("off") is None


def test_an_unknown_setting_is_refused_naming_the_ones_it_takes() -> None:
    with pytest.raises(InvalidRequest, match="threads") as info:
        get_registry().embedder("minilm", {"thread": 2})
    assert "thread" in str(info.value)


def test_a_bad_setting_value_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="max_tokens"):
        get_registry().embedder("minilm", {"max_tokens": 512})
