"""The whole parity suite, for `http-remote` against a real `memvault serve` (sqlite behind it)."""

from __future__ import annotations

from typing import Any

import pytest
from httpremote_support import PARITY_TOKEN, ServerProcess

from memvault_parity import ProviderSuite


class TestHttpRemoteParity(ProviderSuite):
    provider = "http-remote"

    @pytest.fixture
    def settings(self, served: ServerProcess) -> dict[str, Any]:
        """The session server; every test uses its own `parity-*` workspace, which the token may touch."""
        return {"url": served.url, "token": PARITY_TOKEN, "timeout": 10.0}
