"""The core's in-process ``memory`` provider keeps the whole provider contract."""

from memvault_parity import ProviderSuite


class TestMemoryParity(ProviderSuite):
    provider = "memory"
