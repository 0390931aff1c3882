from memvault_parity import ProviderSuite


class TestTemplateProviderParity(ProviderSuite):
    provider = "template-provider"
