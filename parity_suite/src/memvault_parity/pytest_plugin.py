"""The suite's pytest plugin (entry point ``pytest11``).

It makes pytest rewrite the suite's assertions, so a failing standard test
shows the values it compared, also when the suite is installed as a regular
(non-test) package, and it marks the standard tests newer than a provider's
contract version as new requirements (:mod:`memvault_parity.versions`).
Importing :class:`memvault_parity.ProviderSuite` works without it, the
versions aside.
"""

from __future__ import annotations

from typing import Any

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
    "memvault_parity.versions",
)


def pytest_collection_modifyitems(items: list[Any]) -> None:
    from memvault_parity.versions import mark_new_requirements

    mark_new_requirements(items)
