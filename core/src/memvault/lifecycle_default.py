"""The default lifecycle plugin: recall, capture and tools over the provider verbs.

Registered in every vault with ``trylast=True`` implementations, so a provider
that implements a lifecycle hook itself takes precedence.
"""

from __future__ import annotations

__all__ = ["DefaultLifecycle"]


class DefaultLifecycle:
    """Implements the lifecycle hooks on top of ``memvault_recall`` / ``memvault_retain``."""
