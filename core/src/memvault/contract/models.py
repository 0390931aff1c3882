"""Layer 1: the request and result types that cross every hook, and the closed enums.

Every type is an attrs ``@frozen(kw_only=True)`` class whose validators run at
construction, so an invalid request raises :class:`~memvault.errors.InvalidRequest`
in the caller's process before any provider sees it (contract P1-P10, P14-P16,
P22-P23). Change a request with :func:`attrs.evolve`, which re-runs validation.
Also the partition and label rules providers share (:func:`label_for`,
:func:`parse_label`, :func:`check_cap`).

May import: :mod:`memvault.contract.errors`, :mod:`memvault.contract.embedding`, :mod:`memvault.contract.clock`
and :mod:`memvault.contract.terms`.
"""

from __future__ import annotations

import datetime as _dt
import enum
import hashlib
import re
from collections.abc import Iterable
from typing import Any, Final

from attrs import field, frozen

from memvault.contract import clock
from memvault.contract.embedding import QueryVector
from memvault.contract.errors import CapExceeded, InvalidRequest
from memvault.contract.terms import query_terms, tokenize

__all__ = [
    "CAPS",
    "Capability",
    "DocumentInfo",
    "DocumentRef",
    "ForgetRequest",
    "ForgetResult",
    "HealthStatus",
    "ListDocumentsRequest",
    "ListDocumentsResult",
    "Mode",
    "Partition",
    "Quarantine",
    "QuarantineRecord",
    "ReadRequest",
    "ReadResult",
    "RecallRequest",
    "RecallResult",
    "RecallSnippet",
    "RetainRequest",
    "RetainResult",
    "StoredBody",
    "Tier",
    "body_sha256",
    "cap_warning",
    "check_cap",
    "effective_expiry",
    "label_for",
    "parse_label",
    "today_utc",
    "validate_identifier",
]


class Tier(str, enum.Enum):
    """The closed set of memory tiers (contract P1). Accepts its string values."""

    AGENT = "AGENT"
    CREW = "CREW"
    PERSONA = "PERSONA"
    PINS = "pins"
    DAILY = "daily"
    PEERS = "peers"
    LESSONS = "lessons"

    def __str__(self) -> str:
        return self.value

    @property
    def is_agent_tier(self) -> bool:
        """Every tier but ``CREW`` belongs to an agent."""
        return self is not Tier.CREW


class Mode(str, enum.Enum):
    """How a retain combines with the stored body (contract P5). No default exists."""

    REPLACE = "replace"
    APPEND = "append"

    def __str__(self) -> str:
        return self.value


class Capability:
    """Names of optional provider capabilities. The parity suite skips, never loosens, by them."""

    CASCADE_FORGET: Final = "cascade_forget"  # forget by data_subject_id (P24)
    MULTI_PROCESS: Final = "multi_process"  # several OS processes may share the store (P12, P20)
    DURABLE: Final = "durable"  # acknowledged writes survive kill -9 (P11)
    REMOTE: Final = "remote"  # answers over a network: 1000 ms health deadline (P26)
    QUARANTINE: Final = "quarantine"  # keeps quarantine copies of rejected writes (P30)
    LIST_DOCUMENTS: Final = "list_documents"  # enumerates documents (memvault_list_documents, P32)
    #: The provider's other end scans writes and reads itself (a memory service, P29): a vault on it
    #: runs no scanner of its own unless asked (``scanner="builtin"``). A remote database does not.
    SCANS_UPSTREAM: Final = "scans_upstream"
    #: The provider's retain calls :func:`memvault.contract.scanning.check_stored` with the stored body of
    #: an append, inside its write and before writing anything (P29): the scanner reads nothing back.
    CHECKS_STORED: Final = "checks_stored"
    #: The provider keeps a vector per indexed line and fuses them into recall (P36-P40): it
    #: implements ``memvault_vectors_pending``, ``memvault_vectors_store`` and ``memvault_vectors_backlog``
    #: and ranks a request carrying ``RecallRequest.vector`` with :func:`memvault.search.fuse`.
    VECTORS: Final = "vectors"
    #: The provider stores each document's expiry (``RetainRequest.expires_at`` and its tier's
    #: ``RetainRequest.retention``), treats an expired document as absent for every verb from that
    #: moment, and removes it with erasure's guarantees in ``memvault_sweep_expired`` (P41-P43).
    EXPIRY: Final = "expiry"
    #: The provider records ``RetainRequest.idempotency_key`` in the same transaction as the write and
    #: answers a repeat with the recorded result, writing nothing (P44-P45).
    IDEMPOTENT_WRITES: Final = "idempotent_writes"

    ALL: Final = frozenset(
        {
            CASCADE_FORGET,
            MULTI_PROCESS,
            DURABLE,
            REMOTE,
            QUARANTINE,
            LIST_DOCUMENTS,
            SCANS_UPSTREAM,
            CHECKS_STORED,
            VECTORS,
            EXPIRY,
            IDEMPOTENT_WRITES,
        }
    )


#: Size caps on the final body in bytes (contract P9). ``None``: no cap.
CAPS: Final[dict[Tier, int | None]] = {
    Tier.AGENT: 4000,
    Tier.CREW: 4000,
    Tier.PERSONA: 1500,
    Tier.PINS: 8000,
    Tier.DAILY: 30000,
    Tier.PEERS: 1500,
    Tier.LESSONS: None,
}
_WARN_AT: Final = 0.8
MAX_RECALL_LIMIT: Final = 20
MAX_SNIPPET_CHARS: Final = 500
#: Bounds on a recall query (contract P14): its size in UTF-8 bytes and its number of
#: distinct search terms (stemmed, stop words aside; see :func:`memvault.contract.terms.query_terms`).
#: Recall cost grows with the distinct terms; a natural-language question of a
#: few sentences uses well under a tenth of either bound.
MAX_QUERY_BYTES: Final = 4096
MAX_QUERY_TERMS: Final = 128

_IDENTIFIER = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_IDENTIFIER_RULE: Final = "1-128 characters of A-Z a-z 0-9 . _ : @ -, not starting with '.'"
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_FIXED_LABELS: Final = {
    Tier.AGENT: "AGENT.md",
    Tier.CREW: "CREW.md",
    Tier.PERSONA: "PERSONA.md",
    Tier.PINS: "pins.md",
    Tier.LESSONS: "lessons.md",
}
_LABEL_TIERS: Final = {label: tier for tier, label in _FIXED_LABELS.items()}


def today_utc() -> str:
    """Today's date in UTC as ``YYYY-MM-DD`` (the default ``daily`` key, P7)."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def validate_identifier(value: object, field_name: str, *, required: bool = True) -> str:
    """Check one identifier against the rule of contract P3 and return it.

    :raises InvalidRequest: naming ``field_name`` and the rule.
    """
    if not isinstance(value, str):
        raise InvalidRequest(f"{field_name} must be a string, got {type(value).__name__}", field=field_name)
    if value == "":
        if required:
            raise InvalidRequest(f"{field_name} is required: set it to {_IDENTIFIER_RULE}", field=field_name)
        return value
    bad = _unsafe_reason(value)
    if bad or not _IDENTIFIER.fullmatch(value) or value.startswith("."):
        why = bad or "it has a character outside the allowed set, or is too long"
        raise InvalidRequest(
            f"{field_name} {value[:140]!r} is not a valid identifier ({why}): use {_IDENTIFIER_RULE}",
            field=field_name,
        )
    return value


def _unsafe_reason(value: str) -> str:
    if "/" in value or "\\" in value:
        return "it contains a path separator"
    if ".." in value:
        return "it contains '..'"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "it contains NUL or a control character"
    if value.startswith("."):
        return "it starts with '.'"
    return ""


def _to_tier(value: object, field_name: str = "tier") -> Tier:
    if isinstance(value, Tier):
        return value
    if isinstance(value, str):
        try:
            return Tier(value)
        except ValueError:
            pass
    allowed = ", ".join(t.value for t in Tier)
    raise InvalidRequest(f"{field_name} {value!r} is not a tier: use one of {allowed}", field=field_name)


def _to_optional_tier(value: object) -> Tier | None:
    if value is None or value == "":
        return None
    return _to_tier(value)


def _to_mode(value: object) -> Mode | None:
    if isinstance(value, Mode):
        return value
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return Mode(value)
        except ValueError:
            pass
    raise InvalidRequest(f"mode {value!r} is not a mode: use 'replace' or 'append'", field="mode")


def _normalise_key(tier: Tier, key: object, field_name: str = "key") -> str:
    """Apply P7: daily defaults to today, peers needs a slug, other tiers ignore the key."""
    if not isinstance(key, str):
        raise InvalidRequest(f"{field_name} must be a string, got {type(key).__name__}", field=field_name)
    if tier is Tier.DAILY:
        if key == "":
            return today_utc()
        if not _ISO_DATE.fullmatch(key):
            raise InvalidRequest(
                f"{field_name} {key[:140]!r} is not an ISO date: daily keys are YYYY-MM-DD, "
                "or empty for today's UTC date",
                field=field_name,
            )
        try:
            _dt.date.fromisoformat(key)
        except ValueError:
            raise InvalidRequest(
                f"{field_name} {key!r} is not a real calendar date: use YYYY-MM-DD", field=field_name
            ) from None
        return key
    if tier is Tier.PEERS:
        if key == "":
            raise InvalidRequest(
                f"key is required for the peers tier: set it to the peer's slug ({_IDENTIFIER_RULE})",
                field=field_name,
            )
        return validate_identifier(key, field_name)
    return ""


def label_for(tier: Tier, key: str = "") -> str:
    """The tier-relative document label of contract P4 (``daily/2026-01-31.md``)."""
    if tier is Tier.DAILY:
        return f"daily/{key}.md"
    if tier is Tier.PEERS:
        return f"peers/{key}.md"
    return _FIXED_LABELS[tier]


def parse_label(label: object, field_name: str = "id") -> tuple[Tier, str]:
    """Split a document label (P4) into its tier and key.

    :raises InvalidRequest: when ``label`` is not one of the P4 shapes.
    """
    if isinstance(label, str):
        fixed = _LABEL_TIERS.get(label)
        if fixed is not None:
            return fixed, ""
        for prefix, tier in (("daily/", Tier.DAILY), ("peers/", Tier.PEERS)):
            if label.startswith(prefix) and label.endswith(".md"):
                key = label[len(prefix) : -len(".md")]
                if key:
                    try:
                        return tier, _normalise_key(tier, key, field_name)
                    except InvalidRequest:
                        pass
                break
    raise InvalidRequest(
        f"{field_name} {str(label)[:140]!r} is not a document label: use one of AGENT.md, CREW.md, "
        "PERSONA.md, pins.md, lessons.md, daily/<YYYY-MM-DD>.md, peers/<slug>.md",
        field=field_name,
    )


def check_cap(tier: Tier, *, current: int, projected: int) -> str:
    """Enforce the tier's cap on a final body of ``projected`` bytes (contract P9).

    Providers call this with the stored body's size and the size the write would
    produce, before writing anything.

    :return: the usage warning when the body reaches 80 % of the cap, else ``""``.
    :raises CapExceeded: when ``projected`` is over the cap.
    """
    cap = CAPS[tier]
    if cap is None:
        return ""
    if projected > cap:
        raise CapExceeded(tier=tier.value, cap=cap, projected=projected, current=current)
    return cap_warning(tier, projected)


def cap_warning(tier: Tier, size: int) -> str:
    """``"N of C bytes, P%"`` when ``size`` is at or above 80 % of the cap, else ``""``."""
    cap = CAPS[tier]
    if cap is None or size < cap * _WARN_AT:
        return ""
    return f"{tier.value} document uses {size} of {cap} bytes, {size * 100 // cap}%"


def _require_partition(tier: Tier, agent_id: str, crew_id: str) -> None:
    if tier is Tier.CREW:
        if not crew_id:
            raise InvalidRequest(
                "crew_id is required for the CREW tier: set crew_id to the crew's identifier",
                field="crew_id",
            )
    elif not agent_id:
        raise InvalidRequest(
            f"agent_id is required for the {tier.value} tier: set agent_id to the agent's identifier",
            field="agent_id",
        )


def _identifier(required: bool) -> Any:
    def check(instance: object, attribute: Any, value: object) -> None:
        validate_identifier(value, attribute.name, required=required)

    return check


@frozen(kw_only=True)
class Partition:
    """One owner's space: an agent's (agent tiers) or a crew's (``CREW``) in a workspace."""

    workspace_id: str
    kind: str  # "agent" or "crew"
    owner_id: str


@frozen(kw_only=True)
class DocumentRef:
    """Where one document lives: its partition and its label."""

    partition: Partition
    tier: Tier
    key: str

    @property
    def label(self) -> str:
        return label_for(self.tier, self.key)

    @property
    def columns(self) -> tuple[str, str, str, str, str]:
        """``(workspace_id, kind, owner_id, tier, key)``: the document's address as a database keys it."""
        part = self.partition
        return (part.workspace_id, part.kind, part.owner_id, self.tier.value, self.key)


def _ref(workspace_id: str, agent_id: str, crew_id: str, tier: Tier, key: str) -> DocumentRef:
    if tier is Tier.CREW:
        partition = Partition(workspace_id=workspace_id, kind="crew", owner_id=crew_id)
    else:
        partition = Partition(workspace_id=workspace_id, kind="agent", owner_id=agent_id)
    return DocumentRef(partition=partition, tier=tier, key=key)


def _content(instance: object, attribute: Any, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidRequest(f"content must be a string, got {type(value).__name__}", field="content")
    if value == "":
        raise InvalidRequest("content is required: retain a non-empty text", field="content")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            "content is not valid UTF-8 (it holds a lone surrogate): pass real text", field="content"
        ) from None


def _to_expiry(value: object) -> _dt.datetime | None:
    if value is None or (isinstance(value, _dt.datetime) and value.utcoffset() is not None):
        return value
    shown = "a naive datetime" if isinstance(value, _dt.datetime) else type(value).__name__
    raise InvalidRequest(
        f"expires_at must be a timezone-aware datetime, got {shown}: pass an aware time, for example "
        "datetime.now(timezone.utc) + timedelta(days=30)",
        field="expires_at",
    )


def _to_retention(value: object) -> _dt.timedelta | None:
    if value is None or (isinstance(value, _dt.timedelta) and value > _dt.timedelta(0)):
        return value
    raise InvalidRequest(f"retention must be a positive timedelta or None, got {value!r}", field="retention")


def effective_expiry(
    expires_at: _dt.datetime | None, written_at: _dt.datetime, retention: _dt.timedelta | None
) -> _dt.datetime | None:
    """When a document written at ``written_at`` expires (P41, P43): the earlier of its explicit
    expiry and ``written_at + retention``; ``None`` when neither is set (kept for ever)."""
    candidates = [t for t in (expires_at, written_at + retention if retention is not None else None) if t is not None]
    return min(candidates) if candidates else None


class _AddressesOneDocument:
    """What retain and read requests share: they name exactly one document."""

    workspace_id: str
    agent_id: str
    crew_id: str
    tier: Tier
    key: str

    @property
    def ref(self) -> DocumentRef:
        """The partition and label of the document."""
        return _ref(self.workspace_id, self.agent_id, self.crew_id, self.tier, self.key)

    @property
    def label(self) -> str:
        """The document label (P4)."""
        return label_for(self.tier, self.key)


@frozen(kw_only=True)
class RetainRequest(_AddressesOneDocument):
    """Store ``content`` in one document (contract P5-P13).

    ``mode`` has no default: pass ``"replace"`` or ``"append"``. ``key`` is the
    date for ``daily`` (empty: today's UTC date) and the slug for ``peers``.
    """

    workspace_id: str = field(default="", validator=_identifier(True))
    agent_id: str = field(default="", validator=_identifier(False))
    crew_id: str = field(default="", validator=_identifier(False))
    tier: Tier = field(converter=_to_tier)
    key: str = ""
    content: str = field(default="", validator=_content)
    mode: Mode | None = field(default=None, converter=_to_mode)
    data_subject_id: str = field(default="", validator=_identifier(False))
    #: Optional (P41): when the document stops being returned and is removed, timezone-aware.
    #: It applies to the whole document (an append names the same expiry or none).
    expires_at: _dt.datetime | None = field(default=None, converter=_to_expiry)
    #: Optional (P44): a repeat of this write with the same key and the same request returns the
    #: first result and writes nothing; the same key with another request is ``IdempotencyConflict``.
    idempotency_key: str = field(default="", validator=_identifier(False))
    #: Set by the vault, never by a caller and never on the wire (P43): the retention of this
    #: write's workspace and tier under the vault's policy. ``None``: kept until ``expires_at``.
    retention: _dt.timedelta | None = field(default=None, eq=False, repr=False, converter=_to_retention)

    def __attrs_post_init__(self) -> None:
        if self.mode is None:
            raise InvalidRequest(
                "mode is required: set mode='replace' to overwrite or mode='append' to add",
                field="mode",
            )
        if self.tier is Tier.LESSONS:
            raise InvalidRequest(
                "the lessons tier is read-only through retain: lessons are curated by the "
                "operator; write to another tier",
                field="tier",
            )
        _require_partition(self.tier, self.agent_id, self.crew_id)
        object.__setattr__(self, "key", _normalise_key(self.tier, self.key))

    def fingerprint(self) -> str:
        """The hex sha256 of what this write does (P44): an idempotency key's repeat must match it.

        Covers the workspace, partition, tier, label, mode, content, data subject and
        ``expires_at`` (as an ISO-8601 instant in UTC); not the key itself nor ``retention``.
        """
        expires = self.expires_at.astimezone(_dt.timezone.utc).isoformat() if self.expires_at else ""
        parts = (
            self.workspace_id,
            self.agent_id,
            self.crew_id,
            self.tier.value,
            self.label,
            self.mode.value if self.mode else "",
            self.content,
            self.data_subject_id,
            expires,
        )
        digest = hashlib.sha256()
        for part in parts:
            data = part.encode("utf-8")
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
        return digest.hexdigest()

    def purge_at(self, now: _dt.datetime | None = None) -> _dt.datetime | None:
        """When what this write stores at ``now`` (default :func:`memvault.contract.clock.now`) expires
        (P41-P43): the earlier of ``expires_at`` and ``now + retention``; ``None``: never. (An append
        that keeps its document's expiry uses :func:`effective_expiry` with the kept one.)"""
        return effective_expiry(self.expires_at, clock.now() if now is None else now, self.retention)

    def applied_to(self, stored: str, subjects: Iterable[str] = ()) -> StoredBody:
        """What this write makes of a document whose body is ``stored`` (``""``: none yet).

        The final body (``stored + content`` for ``append``, ``content`` for
        ``replace``), its size, the cap's warning, and the document's data subjects
        with this request's added (P13). Call it under the provider's write lock,
        before writing anything.

        :raises CapExceeded: when the final body is over the tier's cap (P9).
        """
        body = stored + self.content if self.mode is Mode.APPEND else self.content
        size = len(body.encode("utf-8"))
        warning = check_cap(self.tier, current=len(stored.encode("utf-8")), projected=size)
        kept = frozenset(subjects)
        if self.data_subject_id:
            kept |= {self.data_subject_id}
        return StoredBody(body=body, bytes=size, warning=warning, subjects=kept)


@frozen(kw_only=True)
class StoredBody:
    """A document's body after a write (:meth:`RetainRequest.applied_to`)."""

    body: str
    bytes: int
    warning: str
    subjects: frozenset[str]


@frozen(kw_only=True)
class RetainResult:
    """``id`` is the label (P4), ``bytes`` the stored body's size, ``warning`` the 80 % notice."""

    id: str
    bytes: int
    warning: str = ""


def _to_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"limit must be an integer, got {value!r}", field="limit")
    if value <= 0 or value > MAX_RECALL_LIMIT:
        return MAX_RECALL_LIMIT
    return value


def _query(instance: object, attribute: Any, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidRequest(f"query must be a string, got {type(value).__name__}", field="query")
    if not value.strip():
        raise InvalidRequest("query must contain a non-space character: say what to look for", field="query")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequest(
            "query is not valid UTF-8 (it holds a lone surrogate): pass real text", field="query"
        ) from None
    if size > MAX_QUERY_BYTES:
        raise InvalidRequest(
            f"query is {size} bytes, over the limit of {MAX_QUERY_BYTES} UTF-8 bytes: "
            "ask a shorter question (the key words are enough)",
            field="query",
        )
    count = len(query_terms(tokenize(value)))
    if count > MAX_QUERY_TERMS:
        raise InvalidRequest(
            f"query has {count} distinct search terms, over the limit of {MAX_QUERY_TERMS} distinct search terms: "
            "ask a shorter question, or split it into several recalls",
            field="query",
        )


def _optional_vector(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and not isinstance(value, QueryVector):
        raise InvalidRequest("vector must be a memvault.QueryVector or None", field="vector")


@frozen(kw_only=True)
class RecallRequest:
    """Search the caller's partitions for lines matching ``query`` (P14-P20).

    ``tier`` empty searches every tier the caller can read: the agent tiers of
    ``agent_id`` if given and ``CREW`` of ``crew_id`` if given. ``limit`` is
    advisory: ``<= 0`` or ``> 20`` becomes 20.
    """

    workspace_id: str = field(default="", validator=_identifier(True))
    agent_id: str = field(default="", validator=_identifier(False))
    crew_id: str = field(default="", validator=_identifier(False))
    query: str = field(default="", validator=_query)
    tier: Tier | None = field(default=None, converter=_to_optional_tier)
    limit: int = field(default=MAX_RECALL_LIMIT, converter=_to_limit)
    #: Optional (recall by meaning, P36): the query embedded by the vault's embedder. The
    #: vault sets it for a provider that declares ``vectors``; it never crosses the wire
    #: (a service embeds its callers' queries itself). ``None``: lexical ranking only.
    vector: QueryVector | None = field(default=None, eq=False, repr=False, validator=_optional_vector)

    def __attrs_post_init__(self) -> None:
        if self.tier is not None:
            _require_partition(self.tier, self.agent_id, self.crew_id)
        elif not self.agent_id and not self.crew_id:
            raise InvalidRequest(
                "recall needs agent_id or crew_id (or both): set the partition to search",
                field="agent_id",
            )

    def scopes(self) -> tuple[tuple[Partition, tuple[Tier, ...]], ...]:
        """The partitions this request may read and, for each, the tiers to search."""
        agent_tiers = tuple(t for t in Tier if t.is_agent_tier)
        out: list[tuple[Partition, tuple[Tier, ...]]] = []
        if self.tier is not None:
            ref = _ref(self.workspace_id, self.agent_id, self.crew_id, self.tier, "")
            return ((ref.partition, (self.tier,)),)
        if self.agent_id:
            out.append((Partition(workspace_id=self.workspace_id, kind="agent", owner_id=self.agent_id), agent_tiers))
        if self.crew_id:
            out.append((Partition(workspace_id=self.workspace_id, kind="crew", owner_id=self.crew_id), (Tier.CREW,)))
        return tuple(out)


def _optional_score(instance: object, attribute: Any, value: Any) -> None:
    if value is not None:
        _score(instance, attribute, value)


def _score(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"score must be a number in [0, 1], got {value!r}")


def _line(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"line must be a 1-based integer, got {value!r}")


def _snippet(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or len(value) > MAX_SNIPPET_CHARS:
        raise ValueError(f"snippet must be a string of at most {MAX_SNIPPET_CHARS} characters")


@frozen(kw_only=True)
class RecallSnippet:
    """One hit (P18): the document label, the 1-based line, the text around the match, a score.

    ``digest`` (optional, added after the first release) is the sha256 of the
    document body the hit came from.
    """

    source: str
    line: int = field(validator=_line)
    snippet: str = field(validator=_snippet)
    score: float = field(validator=_score)
    #: Optional: the hex sha256 of the source document's body as it was searched. A
    #: provider that fills it lets the scanner reuse a cached verdict instead of
    #: reading the document back; "" means unknown.
    digest: str = ""
    #: Optional (recall by meaning, P39): the parts of ``score`` when the recall fused
    #: meaning in: the line's lexical score (0 when it shares no term) and its cosine
    #: similarity to the query, clipped to [0, 1]. ``None`` for a lexical-only recall,
    #: or ``similarity`` ``None`` for a line not embedded yet.
    lexical: float | None = field(default=None, validator=_optional_score)
    similarity: float | None = field(default=None, validator=_optional_score)


def _snippet_list(value: Iterable[RecallSnippet]) -> list[RecallSnippet]:
    return list(value)


def _label_list(value: Iterable[str]) -> list[str]:
    return list(value)


@frozen(kw_only=True)
class RecallResult:
    """Hits sorted by score, highest first, and the labels of quarantined documents (P18-P19)."""

    hits: list[RecallSnippet] = field(factory=list, converter=_snippet_list)
    quarantined: list[str] = field(factory=list, converter=_label_list)


@frozen(kw_only=True)
class ReadRequest(_AddressesOneDocument):
    """Read one whole document (P21). ``key`` as for retain."""

    workspace_id: str = field(default="", validator=_identifier(True))
    agent_id: str = field(default="", validator=_identifier(False))
    crew_id: str = field(default="", validator=_identifier(False))
    tier: Tier = field(converter=_to_tier)
    key: str = ""

    def __attrs_post_init__(self) -> None:
        _require_partition(self.tier, self.agent_id, self.crew_id)
        object.__setattr__(self, "key", _normalise_key(self.tier, self.key))


@frozen(kw_only=True)
class Quarantine:
    """Why the scanner holds a document back: the rule that fired and the body's sha256."""

    category: str
    pattern: str
    sha256: str


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def body_sha256(body: str) -> str:
    """The hex sha256 of a body's UTF-8 bytes: a document's digest (``RecallSnippet.digest``,
    ``DocumentInfo.digest``) and what ``ContentRejected`` and quarantine records carry."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def validate_sha256(value: object, field_name: str = "sha256") -> str:
    """Check a hex sha256 digest (64 lowercase hex characters, as ``ContentRejected`` carries).

    :raises InvalidRequest: naming ``field_name``.
    """
    if not isinstance(value, str) or not _SHA256_HEX.fullmatch(value):
        shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
        raise InvalidRequest(
            f"{field_name} {shown} is not a sha256 digest: use the 64 lowercase hex characters "
            "ContentRejected reported",
            field=field_name,
        )
    return value


def validate_text(value: object, field_name: str) -> str:
    """Check that ``value`` is a string of real text (encodable as UTF-8: no lone surrogates).

    :raises InvalidRequest: naming ``field_name``.
    """
    if not isinstance(value, str):
        raise InvalidRequest(f"{field_name} must be a string, got {type(value).__name__}", field=field_name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            f"{field_name} is not valid UTF-8 (it holds a lone surrogate): pass real text", field=field_name
        ) from None
    return value


def _text(instance: object, attribute: Any, value: Any) -> None:
    validate_text(value, attribute.name)


def _label(instance: object, attribute: Any, value: Any) -> None:
    parse_label(value, attribute.name)


def _aware_time(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, _dt.datetime) or value.utcoffset() is None:
        raise InvalidRequest(f"{attribute.name} must be a timezone-aware timestamp", field=attribute.name)


def _optional_aware_time(instance: object, attribute: Any, value: Any) -> None:
    if value is not None:
        _aware_time(instance, attribute, value)


def _sha256(instance: object, attribute: Any, value: Any) -> None:
    validate_sha256(value, attribute.name)


@frozen(kw_only=True)
class QuarantineRecord:
    """A copy of content the scanner rejected, kept by the provider for the operator (P30).

    ``label`` is the document the write targeted; ``content`` the rejected final body.
    Identifiers follow P3, ``label`` is a P4 label and ``sha256`` 64 lowercase hex
    characters: a record a provider stores can never name a path outside its workspace.
    """

    workspace_id: str = field(validator=_identifier(True))
    agent_id: str = field(default="", validator=_identifier(False))
    crew_id: str = field(default="", validator=_identifier(False))
    label: str = field(validator=_label)
    category: str = field(validator=_text)
    pattern: str = field(validator=_text)
    sha256: str = field(validator=_sha256)
    content: str = field(validator=_text)
    created_at: _dt.datetime = field(factory=clock.now, validator=_aware_time)
    #: The data subject the rejected write named, so erasure by subject removes the copy too (P24).
    data_subject_id: str = field(default="", validator=_identifier(False))
    #: Optional (P42): when the copy expires, the earlier of the rejected write's ``expires_at`` and
    #: ``created_at`` plus its tier's retention; ``None``: never. List and get omit an expired copy
    #: and the sweep removes it.
    expires_at: _dt.datetime | None = field(default=None, validator=_optional_aware_time)


@frozen(kw_only=True)
class ReadResult:
    """The document's label and body; a missing document has an empty body (P21).

    A quarantined document has ``content`` = a ``[BLOCKED: ...]`` placeholder and
    ``quarantine`` set; its text is never returned.
    """

    id: str
    content: str = ""
    quarantine: Quarantine | None = None

    @property
    def quarantined(self) -> bool:
        return self.quarantine is not None


@frozen(kw_only=True)
class ForgetRequest:
    """Remove one document by ``id`` (its label) or every document of a data subject (P22-P24)."""

    workspace_id: str = field(default="", validator=_identifier(True))
    agent_id: str = field(default="", validator=_identifier(False))
    crew_id: str = field(default="", validator=_identifier(False))
    id: str = ""
    data_subject_id: str = field(default="", validator=_identifier(False))

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise InvalidRequest(f"id must be a string, got {type(self.id).__name__}", field="id")
        if bool(self.id) == bool(self.data_subject_id):
            raise InvalidRequest("must set exactly one of id or data_subject_id", field="id")
        if self.id:
            tier, _key = parse_label(self.id)
            _require_partition(tier, self.agent_id, self.crew_id)

    @property
    def ref(self) -> DocumentRef:
        """The document to remove; only for a forget by ``id``."""
        tier, key = parse_label(self.id)
        return _ref(self.workspace_id, self.agent_id, self.crew_id, tier, key)


def _flag(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{attribute.name} must be true or false, got {value!r}")


def _count(instance: object, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


@frozen(kw_only=True)
class ForgetResult:
    """How many documents were removed: 1 or 0 by id, the count by data subject.

    ``pending`` (optional, added after the first release; default ``False``,
    meaning complete): ``True`` when the documents are removed from every verb's
    view but the provider could not yet scrub their bytes from its storage files
    (for example readers held SQLite's write-ahead log). The provider keeps a
    durable record and finishes the scrub at the next opportunity; repeating the
    same forget finishes it or reports ``pending`` again (P24).
    """

    removed: int
    #: Optional: the erasure's text may still be on disk; the provider finishes it later (P24).
    pending: bool = field(default=False, validator=_flag)


def _aware(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, _dt.datetime) or value.utcoffset() is None:
        raise ValueError("checked_at must be a timezone-aware datetime")


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


@frozen(kw_only=True)
class HealthStatus:
    """``ok``; ``message`` empty when ok, a triage sentence when not; ``checked_at`` in UTC (P25)."""

    ok: bool
    message: str = ""
    checked_at: _dt.datetime = field(factory=_now, validator=_aware)
    #: Optional (added after the first release): how many erasures the provider has
    #: recorded as pending, i.e. removed from view but not yet scrubbed from its
    #: storage files (P24). It does not make ``ok`` false: the store works.
    pending_erasures: int = field(default=0, validator=_count)
    #: Optional (recall by meaning, P37): how many indexed lines wait for a vector of the
    #: vault's embedder. They are found lexically meanwhile; it does not make ``ok`` false.
    embedding_backlog: int = field(default=0, validator=_count)
    #: Optional (P43): how many documents are past their expiry but not swept yet (absent from
    #: every verb already). A cheap count; it does not make ``ok`` false: the next sweep removes them.
    retention_overdue: int = field(default=0, validator=_count)


# -- enumeration (P32) ---------------------------------------------------------


@frozen(kw_only=True)
class ListDocumentsRequest:
    """Enumerate stored documents (contract P32): the hook behind export and ``memvault inspect``.

    Every field narrows the listing; an empty one does not. ``workspace_id``
    empty lists every workspace. ``agent_id`` and ``crew_id`` select partitions:
    with neither, every partition; with one or both, the documents of that
    agent and of that crew. ``tier`` keeps one tier (empty: all).
    """

    workspace_id: str = field(default="", validator=_identifier(False))
    agent_id: str = field(default="", validator=_identifier(False))
    crew_id: str = field(default="", validator=_identifier(False))
    tier: Tier | None = field(default=None, converter=_to_optional_tier)

    def includes(self, *, workspace_id: str, agent_id: str, crew_id: str, tier: Tier | str) -> bool:
        """Whether a document of this workspace, owner and tier belongs in the listing.

        Providers may filter in storage and use this for what remains.
        """
        if self.workspace_id and workspace_id != self.workspace_id:
            return False
        if self.tier is not None and tier != self.tier:
            return False
        if not self.agent_id and not self.crew_id:
            return True
        return bool((self.agent_id and agent_id == self.agent_id) or (self.crew_id and crew_id == self.crew_id))


def _subject_tuple(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ValueError("subjects must be a sequence of data subject ids, not one string")
    return tuple(sorted(set(value)))


def _non_negative(instance: object, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


def _optional_aware(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, _dt.datetime) or value.utcoffset() is None):
        raise ValueError(f"{attribute.name} must be a timezone-aware datetime or None")


@frozen(kw_only=True)
class DocumentInfo:
    """One stored document as the enumerate hook reports it, without its body.

    ``agent_id`` is set for the agent tiers and ``crew_id`` for ``CREW`` (the
    other is ``""``). ``subjects`` are the data subjects the document carries
    (P13), sorted; ``digest`` is the hex sha256 of the body's UTF-8 bytes and
    ``bytes`` their count; ``updated_at`` the last accepted write, when the
    provider knows it.
    """

    workspace_id: str
    agent_id: str = ""
    crew_id: str = ""
    tier: Tier = field(converter=_to_tier)
    label: str
    bytes: int = field(validator=_non_negative)
    subjects: tuple[str, ...] = field(default=(), converter=_subject_tuple)
    digest: str
    updated_at: _dt.datetime | None = field(default=None, validator=_optional_aware)
    #: Optional (P41): when the document expires, its effective expiry (the earlier of its
    #: ``RetainRequest.expires_at`` and its last write plus its tier's retention); ``None``: never,
    #: or the provider does not store expiries. Export carries it so an import keeps it.
    expires_at: _dt.datetime | None = field(default=None, validator=_optional_aware)

    @property
    def key(self) -> str:
        """The tier key of the label (the date of a daily document, the slug of a peer)."""
        return parse_label(self.label, "label")[1]

    @property
    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.workspace_id, self.crew_id, self.agent_id, self.label)


def _sorted_documents(value: Iterable[DocumentInfo]) -> list[DocumentInfo]:
    return sorted(value, key=lambda doc: doc.sort_key)


@frozen(kw_only=True)
class ListDocumentsResult:
    """The matching documents, sorted by (workspace_id, crew_id, agent_id, label)."""

    documents: list[DocumentInfo] = field(factory=list, converter=_sorted_documents)
