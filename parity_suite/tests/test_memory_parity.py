"""The core's in-process ``memory`` provider keeps the whole provider contract."""

from memvault_parity import ProviderSuite


class TestMemoryParity(ProviderSuite):
    provider = "memory"
    strict = True  # our own provider: every contract line up to the newest fails it
