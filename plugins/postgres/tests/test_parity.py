"""The shared parity suite against the postgres provider, on the session's real server."""

from __future__ import annotations

from memvault_parity import ProviderSuite


class TestPostgresParity(ProviderSuite):
    # The registered scratch settings: a fresh schema per test on the session's server.
    provider = "postgres"
    strict = True  # our own provider: every contract line up to the newest fails it
