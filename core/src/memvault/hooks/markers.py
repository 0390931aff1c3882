"""The pluggy markers. Project name and entry-point group are both ``memvault``.

May import: nothing of memvault.
"""

from __future__ import annotations

from typing import Final

import pluggy

PROJECT: Final = "memvault"

#: Marks a hook specification in :mod:`memvault.hooks`.
hookspec: Final = pluggy.HookspecMarker(PROJECT)
#: Marks a hook implementation: ``@memvault.hookimpl def memvault_recall(self, request): ...``
hookimpl: Final = pluggy.HookimplMarker(PROJECT)
