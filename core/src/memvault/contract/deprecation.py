"""Layer 1: how an old import path keeps working while it is deprecated.

A module path or name that moves is never removed in the release that moves it
(contract D4; the policy is docs/plugin-authors/versioning.md): the old path
forwards to the same object, and the first use of each old path in a process
warns once with :class:`MemvaultRemovedIn1Warning`, naming the new path and the
release that removes the old one.

:func:`forward` builds a module's PEP 562 ``__getattr__`` from a table of
names and the modules that now hold them. The table's module names are given
by the caller (the old path's module), so this module imports nothing of
memvault by name: it resolves the caller's dotted names only when a name is used.

May import: nothing of memvault.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["REMOVED_IN", "MemvaultDeprecationWarning", "MemvaultRemovedIn1Warning", "forward", "warn_moved"]

#: The release that removes every path deprecated so far.
REMOVED_IN: Final = "1.0.0"


class MemvaultDeprecationWarning(DeprecationWarning):
    """Base of memvault's deprecation warnings: filter on it to see or silence them all."""


class MemvaultRemovedIn1Warning(MemvaultDeprecationWarning):
    """A path that still works, and that memvault 1.0.0 removes: the message says what to use instead."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _new_lock() -> None:
    global _warned_lock
    _warned_lock = threading.Lock()  # in a forked child: a thread it does not have may have held it (P35)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def warn_moved(old: str, instead: str, *, stacklevel: int = 2) -> None:
    """Warn, once per process for ``old``, that ``old`` goes in :data:`REMOVED_IN` and what to do instead.

    :param old: the old dotted path (a module, or a module's name).
    :param instead: what to write instead, as a phrase ("import X from memvault.y").
    :param stacklevel: as for :func:`warnings.warn`, counted from the caller.
    """
    with _warned_lock:
        if old in _warned:
            return
        _warned.add(old)
    warnings.warn(
        f"{old} is deprecated and will be removed in memvault {REMOVED_IN}: {instead} "
        "(docs/plugin-authors/versioning.md lists every moved path)",
        MemvaultRemovedIn1Warning,
        stacklevel=stacklevel + 1,
    )


def forward(
    old_module: str,
    moved: Mapping[str, str],
    *,
    replacements: Mapping[str, tuple[Callable[..., Any], str]] | None = None,
    whole: bool = True,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` forwarding ``old_module``'s old names.

    :param old_module: the old module's dotted path (its ``__name__``).
    :param moved: old name -> the dotted module that holds the same object now.
    :param replacements: old names with no object left to forward to: the
        function (kept in the old module) that does what the old one did, and
        what to write instead.
    :param whole: ``True`` when the whole old module is deprecated (one warning
        for the module path, on first use of any name); ``False`` for a live
        module that kept names elsewhere (one warning per name's path).
    :return: ``(__getattr__, __dir__)`` for the old module.
    """
    table = dict(moved)
    kept = dict(replacements or {})

    def getattr_(name: str) -> Any:
        if name in table:
            target = table[name]
            old = old_module if whole else f"{old_module}.{name}"
            warn_moved(old, f"import {name} from {target} instead", stacklevel=2)
            return getattr(importlib.import_module(target), name)
        if name in kept:
            function, instead = kept[name]
            warn_moved(old_module if whole else f"{old_module}.{name}", instead, stacklevel=2)
            return function
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted({*table, *kept})

    return getattr_, dir_
