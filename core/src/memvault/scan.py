"""The built-in prompt-injection scanner (contract P29-P31): a plugin on hook wrappers."""

from __future__ import annotations

from memvault.markers import hookimpl
from memvault.plugins import RegisterScanner

__all__ = ["BuiltinScanner"]


class BuiltinScanner:
    """Wraps retain, recall and read; rejects and quarantines injection shapes."""


@hookimpl
def memvault_register_scanners(register: RegisterScanner) -> None:
    register("builtin", BuiltinScanner)
