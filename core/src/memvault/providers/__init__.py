"""Layer 5, the providers memvault ships: :mod:`memvault.providers.memory`.

May import: :mod:`memvault.contract`, :mod:`memvault.hooks` and :mod:`memvault.search`.
"""
