"""The test module ``memvault parity NAME`` runs: ProviderSuite bound to the chosen provider.

:mod:`memvault_parity.runner` sets :data:`memvault_parity.runner.TARGET` before
pytest imports this file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from memvault_parity.runner import current_target
from memvault_parity.suite import ProviderSuite


class TestParity(ProviderSuite):
    provider = current_target().name
    strict = current_target().strict

    @pytest.fixture
    def settings(self, tmp_path: Path) -> Iterator[Mapping[str, Any]]:
        made = current_target().settings_for(tmp_path)
        yield made
        current_target().clean_up(made)
