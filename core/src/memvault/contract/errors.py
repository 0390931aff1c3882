"""Layer 1: the memvault error hierarchy, every error in one place.

Callers branch on the class (``except CapExceeded``), never on message text.
Every message says what was wrong and how to fix it. Each provider wraps its
own library's exceptions (``sqlite3``, ``httpx``, ``psycopg``, ``OSError``) into
these types with the cause chained (``raise UpstreamError(...) from exc``).

May import: nothing of memvault.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CapExceeded",
    "CompactionFailed",
    "ContentRejected",
    "IdempotencyConflict",
    "InvalidRequest",
    "LifecycleError",
    "MemvaultError",
    "NotSupported",
    "NotesConflict",
    "PluginError",
    "ProviderNotFound",
    "ReplayConflict",
    "SkippedUnreadable",
    "TurnCancelled",
    "TurnFailed",
    "Unauthorized",
    "UpstreamError",
    "UpstreamTimeout",
]


class MemvaultError(Exception):
    """Base class of every error memvault raises on purpose."""


class InvalidRequest(MemvaultError, ValueError):
    """A request broke a rule of the contract; nothing was read or written.

    ``field`` names the offending field when there is one.
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class CapExceeded(MemvaultError):
    """A retain would grow a document past its tier's size cap (contract P9).

    The stored document is unchanged.
    """

    def __init__(self, *, tier: str, cap: int, projected: int, current: int) -> None:
        super().__init__(
            f"{tier} document would be {projected} bytes, over its cap of {cap} bytes "
            f"(currently {current} bytes): shorten the content, or use mode='replace' "
            "with a condensed body"
        )
        self.tier = tier
        self.cap = cap
        self.projected = projected
        self.current = current


class ContentRejected(MemvaultError):
    """The scanner found a prompt-injection or exfiltration shape (contract P29-P30).

    The live document is unchanged. ``kept`` tells whether the provider kept a
    quarantine copy for the operator (the write fails either way: fail closed);
    ``detail`` is the scanner's longer explanation, also part of the message.
    The builtin scanner also fills ``excerpt``, ``span``, ``score`` and ``threshold``.
    """

    def __init__(
        self,
        *,
        category: str,
        pattern: str,
        sha256: str,
        detail: str = "",
        kept: bool = True,
        excerpt: str = "",
        span: tuple[int, int] | None = None,
        score: float | None = None,
        threshold: float | None = None,
    ) -> None:
        extra = f" ({detail})" if detail else ""
        where = (
            "an operator can inspect the quarantined copy with `memvault quarantine show`"
            if kept
            else "no quarantine copy was kept"
        )
        super().__init__(
            f"content rejected by the scanner: category {category!r}, pattern {pattern!r}"
            f"{extra}; sha256 {sha256}. Remove the flagged text; {where}"
        )
        self.category = category
        self.pattern = pattern
        self.sha256 = sha256
        self.detail = detail
        self.kept = kept
        #: The matched text (escaped), where the rule matched in the scanned form (see
        #: ``memvault.scanner.engine.Hit``), and the category's score against its threshold; empty/None
        #: when the scanner that rejected does not say.
        self.excerpt = excerpt
        self.span = span
        self.score = score
        self.threshold = threshold


class IdempotencyConflict(MemvaultError):
    """A retain reused an idempotency key that a different write recorded (contract P44).

    Nothing was written. ``key`` is the key, ``workspace_id`` its scope. A key names
    one write: a repeat of that write (same document, mode, content, data subject
    and expiry) returns the first result; anything else needs a new key.
    """

    def __init__(self, *, key: str, workspace_id: str = "") -> None:
        scope = f" in workspace {workspace_id!r}" if workspace_id else ""
        super().__init__(
            f"idempotency key {key!r}{scope} was already used for a different write (another document, "
            "mode, content, data subject or expiry); nothing was written: use a new key for each distinct "
            "write, and the same key only to repeat the same write"
        )
        self.key = key
        self.workspace_id = workspace_id


class NotSupported(MemvaultError):
    """The provider does not offer this optional capability."""


class ProviderNotFound(MemvaultError, LookupError):
    """No usable provider has that name; the message lists the installed ones.

    ``broken`` names the installed plugins that failed to load, as ``(plugin, distribution,
    error)`` with the error's last traceback line: when one of them would have provided
    ``name`` (its entry point or distribution is named after it), the message says that
    plugin is installed but broken, never that it is missing.
    """

    def __init__(self, name: str, installed: list[str], broken: Sequence[tuple[str, str, str]] = ()) -> None:
        import difflib

        listing = ", ".join(sorted(installed)) or "none"
        close = difflib.get_close_matches(name, installed, n=1, cutoff=0.6)
        theirs = [b for b in broken if _would_provide(b[0], b[1], name)]
        if theirs:
            plugin, dist, error = theirs[0]
            message = (
                f"provider {name!r} is not usable: its plugin {plugin!r} (distribution {dist}) is installed "
                f"but failed to load: {error}. Fix that error (reinstall {dist} and its dependencies, or "
                f"update it for this memvault); `memvault providers` lists every plugin that failed"
            )
        else:
            if close:
                hint = f"did you mean {close[0]!r}? Installed providers: {listing}"
            else:
                hint = (
                    f"installed providers: {listing}. Install the plugin distribution that provides it "
                    f"(for example `pip install memvault-{name}`) or pick one of the installed names"
                )
            message = f"no provider named {name!r} is installed; {hint}"
            if broken:
                failed = "; ".join(f"{p} ({d}): {e}" for p, d, e in broken)
                message += f". Installed plugins that failed to load, one of which may provide it: {failed}"
        super().__init__(message)
        self.name = name
        self.installed = sorted(installed)
        self.broken = [tuple(item) for item in broken]  # JSON brings each back as a list


def _would_provide(plugin: str, distribution: str, name: str) -> bool:
    """Whether a plugin is named after provider ``name`` (entry point ``sqlite``, ``memvault-sqlite``)."""
    dist = distribution.lower().replace("_", "-").replace(".", "-")
    wanted = name.lower()
    return plugin.lower() == wanted or dist in (wanted, f"memvault-{wanted}") or dist.endswith(f"-{wanted}")


class PluginError(MemvaultError):
    """A plugin misbehaved: failed to load, broke a hook's contract, or clashed with another."""


class UpstreamError(MemvaultError):
    """The storage or service behind a provider failed; the cause is chained."""


class UpstreamTimeout(UpstreamError, TimeoutError):
    """The storage or service behind a provider did not answer in time."""


class Unauthorized(MemvaultError, PermissionError):
    """The credential is missing, expired, or not allowed to touch that workspace."""


class SkippedUnreadable(UserWarning):
    """A warning, not an error: a provider skipped one stored item it cannot read and went on with the rest.

    Issued with :func:`warnings.warn` by a verb that returns many items (a workspace's
    quarantine copies, a document's data subjects), where one file broken by hand must
    not hide the others. ``where`` names the item (a path, a table row); the message says
    what is wrong with it and how to repair it. Where skipping would lose memory (a
    document's body for ``read`` or an export) the provider raises ``UpstreamError`` instead.
    Catch it with :func:`warnings.catch_warnings` (``memvault quarantine list`` and
    ``memvault export`` name every such item and exit 1).
    """

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message)
        self.where = where


# -- the lifecycle (contract L5-L14) ------------------------------------------


class LifecycleError(MemvaultError):
    """A lifecycle phase failed; ``slot`` and ``phase`` say where, the cause is chained."""

    def __init__(self, message: str, *, slot: str = "", phase: str = "") -> None:
        super().__init__(message)
        self.slot = slot
        self.phase = phase


class TurnFailed(LifecycleError):
    """The turn failed before (or while) the model could use memory; nothing was committed (L5, L10)."""


class TurnCancelled(TurnFailed):
    """The turn was cancelled; nothing was committed (L10)."""


class CompactionFailed(LifecycleError):
    """A ``compaction.requested`` capture raised: the history is unchanged (L10)."""


class ReplayConflict(LifecycleError):
    """A phase was replayed with the same operation id but a different result (L8)."""


class NotesConflict(MemvaultError):
    """Another writer changed the notes first; ``expected`` and ``actual`` are the versions.

    Reload (or let the model look at the recalled notes again) and retry.
    """

    def __init__(self, *, expected: int, actual: int) -> None:
        super().__init__(
            f"notes changed concurrently: expected version {expected}, the notes are at version {actual}; "
            "read the current notes and retry with expected_version set to it"
        )
        self.expected = expected
        self.actual = actual
