from memvault_parity import ProviderSuite


class TestTemplateProviderParity(ProviderSuite):
    provider = "template-provider"
    strict = True  # our own provider: every contract line up to the newest fails it
