"""memvault-parity: the contract test suite every memvault provider runs.

::

    from memvault_parity import ProviderSuite

    class TestSqliteParity(ProviderSuite):
        provider = "sqlite"
"""

from __future__ import annotations

from memvault_parity.base import SuiteBase, requires, requires_absent
from memvault_parity.suite import ProviderSuite

__all__ = ["ProviderSuite", "SuiteBase", "requires", "requires_absent"]
