"""The suite's pytest plugin (entry point ``pytest11``).

It only makes pytest rewrite the suite's assertions, so a failing standard
test shows the values it compared, also when the suite is installed as a
regular (non-test) package. Importing :class:`memvault_parity.ProviderSuite`
works without it.
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite(
    "memvault_parity.base",
    "memvault_parity.concurrency",
    "memvault_parity.forget",
    "memvault_parity.health",
    "memvault_parity.listing",
    "memvault_parity.partitions",
    "memvault_parity.recall",
    "memvault_parity.retain",
    "memvault_parity.retain_many",
    "memvault_parity.scanner",
    "memvault_parity.suite",
)
