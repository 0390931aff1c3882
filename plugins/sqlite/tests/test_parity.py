"""The shared parity suite against the sqlite provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memvault_parity import ProviderSuite


class TestSqliteParity(ProviderSuite):
    provider = "sqlite"
    strict = True  # our own provider: every contract line up to the newest fails it

    @pytest.fixture
    def settings(self, tmp_path: Path) -> dict[str, Any]:
        return {"path": str(tmp_path / "memory.db")}
