"""Layer 6: the runtime, an agent's slots and the sessions that use them (contract L1).

An agent loop owns one :class:`Runtime` and asks it for a
:class:`~memvault.lifecycle.session.Session` per conversation (the example is
in :mod:`memvault.lifecycle`).

May import: :mod:`memvault.contract` and :mod:`memvault.lifecycle.session`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memvault.contract.errors import InvalidRequest
from memvault.contract.models import validate_identifier
from memvault.lifecycle.session import Session
from memvault.lifecycle.slots import Slot

__all__ = ["Runtime"]


class Runtime:
    """The slots of an agent, and the sessions that use them.

    :param slots: the memory slots; names must be unique.
    :param workspace_id: the default workspace of every slot's partition.
    :param compaction_threshold_tokens: history size (estimated at 4
        characters a token) past which :meth:`Session.needs_compaction` is true.
    """

    def __init__(
        self,
        slots: Iterable[Slot],
        *,
        workspace_id: str = "default",
        compaction_threshold_tokens: int = 8000,
    ) -> None:
        self.slots: tuple[Slot, ...] = tuple(slots)
        names = [s.name for s in self.slots]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidRequest(f"slot names must be unique (L1): {dupes} appear more than once", field="name")
        self.workspace_id = validate_identifier(workspace_id, "workspace_id")
        if isinstance(compaction_threshold_tokens, bool) or not isinstance(compaction_threshold_tokens, int):
            raise InvalidRequest("compaction_threshold_tokens must be an integer", field="compaction_threshold_tokens")
        if compaction_threshold_tokens < 1:
            raise InvalidRequest("compaction_threshold_tokens must be at least 1", field="compaction_threshold_tokens")
        self.compaction_threshold_tokens = compaction_threshold_tokens

    def session(self, session_id: str, *, principal: str | None = None, metadata: Mapping[str, Any] = {}) -> Session:
        """A new conversation. ``principal`` is who is talking (``None``: anonymous)."""
        return Session(self, session_id, principal=principal, metadata=metadata)
