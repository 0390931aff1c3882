"""``ProviderSuite``: every standard test class, mixed together.

A provider's ``tests/test_parity.py`` subclasses it and names the provider::

    from memvault_parity import ProviderSuite

    class TestMyParity(ProviderSuite):
        provider = "my-provider"

Adding a group of tests is adding a mixin to the bases below (the scanner
tests, P29-P31, go in :mod:`memvault_parity.scanner` as ``ScannerTests``; what
the model reads together, in :mod:`memvault_parity.scan_together` as ``JointScanTests``).
"""

from __future__ import annotations

from memvault_parity.concurrency import ConcurrencyTests, CrashTests, ForgetRaceTests, MultiProcessTests
from memvault_parity.forget import ForgetTests, ReadTests, SubjectErasureTests
from memvault_parity.fork import ForkTests
from memvault_parity.health import HealthTests
from memvault_parity.idempotency import IdempotencyTests
from memvault_parity.listing import ListingTests
from memvault_parity.partitions import PartitionTests
from memvault_parity.recall import RecallTests
from memvault_parity.retain import CapTests, ModeTests, TierTests
from memvault_parity.retain_many import RetainManyTests
from memvault_parity.retention import ExpiryTests
from memvault_parity.scan_together import JointScanTests
from memvault_parity.scanner import ScannerTests
from memvault_parity.vectors import VectorTests

__all__ = ["ProviderSuite"]


class ProviderSuite(
    PartitionTests,
    TierTests,
    ModeTests,
    CapTests,
    RetainManyTests,
    RecallTests,
    ReadTests,
    ForgetTests,
    SubjectErasureTests,
    HealthTests,
    ConcurrencyTests,
    ForgetRaceTests,
    MultiProcessTests,
    CrashTests,
    ForkTests,
    ScannerTests,
    JointScanTests,
    ListingTests,
    VectorTests,
    ExpiryTests,
    IdempotencyTests,
):
    """The whole provider contract (P1-P28). Subclass it and set ``provider``.

    * ``provider``: the registered provider name.
    * ``capabilities``: optional override; default: what the provider registered.
      A missing capability skips its tests; it never loosens an assertion.
    * fixture ``settings``: settings for a fresh, empty store (default: the
      provider's registered ``scratch(tmp_path)``).
    * fixture ``vault``: ``memvault.open(provider, **settings)``, closed after the test.

    Override a standard test only with ``@pytest.mark.xfail(reason=...)``;
    ``test_no_overrides_DO_NOT_OVERRIDE`` fails otherwise.
    """
