"""The shared parity suite against local-disk, with every capability it declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from memvault_parity import ProviderSuite


class TestLocalDiskParity(ProviderSuite):
    provider = "local-disk"
    strict = True  # our own provider: every contract line up to the newest fails it

    @pytest.fixture
    def settings(self, tmp_path: Path) -> dict[str, str]:
        root = tmp_path / "memory"
        root.mkdir()  # an empty store is an empty folder; a missing root is unhealthy (P27)
        return {"root": str(root)}
