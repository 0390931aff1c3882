"""memvault-parity: the contract test suite every memvault provider runs.

::

    from memvault_parity import ProviderSuite

    class TestSqliteParity(ProviderSuite):
        provider = "sqlite"

The suite's modules are imported lazily, so that the pytest plugin
(:mod:`memvault_parity.pytest_plugin`) can register them for assertion
rewriting before they load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memvault_parity.base import SuiteBase, requires, requires_absent
    from memvault_parity.suite import ProviderSuite

__all__ = ["ProviderSuite", "SuiteBase", "requires", "requires_absent"]

_WHERE = {
    "ProviderSuite": "memvault_parity.suite",
    "SuiteBase": "memvault_parity.base",
    "requires": "memvault_parity.base",
    "requires_absent": "memvault_parity.base",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'memvault_parity' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
