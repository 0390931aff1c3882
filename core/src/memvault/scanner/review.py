"""A reviewer: a second reader the builtin scanner asks about the texts its cascade is unsure of (issue 36).

The cascade (the rules, a plugin's classifiers, the check by meaning) adds up evidence
and decides; a reviewer reads the whole text and answers *attack* or *benign*. It is
meant for a judge too large to run on every write (a language model the operator
runs, asked over the network), so the scanner asks it only where its answer can
change the verdict:

* a text the cascade stores but found something in (a rule below its threshold, a hit
  by meaning, a window the check by meaning read): an *attack* answer adds one piece of
  evidence of weight 1.0 in the answer's category (pattern id ``review:<category>``),
  which rejects at the default threshold; with ``scope = "all"`` every text is asked;
* a text the cascade rejects, when :attr:`ReviewPolicy.may_clear` lets the reviewer
  overturn that verdict: a *benign* answer stores it. ``"meaning"`` (the default)
  overturns only a verdict the builtin rules alone do not reach (one that rests on a
  model's evidence: the check by meaning, a plugin's classifier); ``"all"`` any
  verdict; ``"none"`` never.

A reviewer that gives no answer (``None``: down, slow, an answer it could not read)
leaves the cascade's verdict, and that verdict is not cached: the next read or write
of the same text asks again. The verdict is the scanner's, so every verb and every
provider see the same one.

May import: :mod:`memvault.contract` and :mod:`memvault.scanner.engine`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, Protocol, runtime_checkable

from attrs import frozen

from memvault.contract.errors import InvalidRequest
from memvault.scanner.engine import CATEGORIES, Finding, Hit

__all__ = [
    "PATTERN_PREFIX",
    "REVIEW_PATTERN_IDS",
    "Draft",
    "Review",
    "ReviewPolicy",
    "Reviewer",
    "calling_as",
    "current_caller",
    "current_workspace",
    "review_hit",
    "reviewing_for",
]

#: The pattern id of a reviewer's evidence is this prefix and the category.
PATTERN_PREFIX: Final = "review:"
#: Every pattern id a reviewer's evidence may carry (``[scan] allow`` may name them).
REVIEW_PATTERN_IDS: Final = frozenset(PATTERN_PREFIX + c for c in CATEGORIES)

Scope = Literal["suspicious", "all"]
MayClear = Literal["none", "meaning", "all"]
Unanswered = Literal["store", "refuse"]
_SCOPES: Final = ("suspicious", "all")
_MAY_CLEAR: Final = ("meaning", "none", "all")  # the default first
_UNANSWERED: Final = ("store", "refuse")


_WORKSPACE: Final[contextvars.ContextVar[str]] = contextvars.ContextVar("memvault_review_workspace", default="")


def current_workspace() -> str:
    """The workspace of the request whose text the reviewer is asked about (``""`` when unknown, such as a
    text judged outside a verb): a reviewer may share its capacity by it, so that one workspace's flood of
    writes does not hold every slot."""
    return _WORKSPACE.get()


@contextlib.contextmanager
def reviewing_for(workspace: str) -> Iterator[None]:
    """The builtin scanner's verbs run inside this: :func:`current_workspace` says ``workspace``."""
    token = _WORKSPACE.set(workspace)
    try:
        yield
    finally:
        _WORKSPACE.reset(token)


_CALLER: Final[contextvars.ContextVar[str]] = contextvars.ContextVar("memvault_review_caller", default="")


def current_caller() -> str:
    """Who sent the request whose text the reviewer is asked about, as an opaque key (``""`` when unknown:
    a vault used in process, where every call is the application's own).

    ``memvault serve`` and ``memvault mcp --transport http`` set it to the token their gate counts a request
    by (``token:`` and a digest of it); ``""`` when the server runs without tokens (an address is shared by
    every client behind one proxy, and such a server has no tenants to be fair among). A token may reach many
    workspaces, so a reviewer that shares its capacity by workspace alone lets one token holder take every
    slot by writing to several at once; sharing by caller too stops that. Compare keys for equality only:
    their form may change.
    """
    return _CALLER.get()


@contextlib.contextmanager
def calling_as(caller: str) -> Iterator[None]:
    """A server runs each provider call inside this: :func:`current_caller` says ``caller``."""
    token = _CALLER.set(caller)
    try:
        yield
    finally:
        _CALLER.reset(token)


@frozen(kw_only=True)
class Draft:
    """What the cascade made of a text before the reviewer is asked.

    :ivar finding: its verdict (``None``: it would store the text).
    :ivar hits: every piece of evidence it found, also below threshold (rules, classifiers, meaning).
    :ivar by_rules: the builtin rules alone reject the text (without a classifier's or the check by meaning's
        evidence).
    :ivar read_by_model: the check by meaning read a window of the text.
    """

    finding: Finding | None
    hits: tuple[Hit, ...] = ()
    by_rules: bool = False
    read_by_model: bool = False

    @property
    def suspicious(self) -> bool:
        """Whether the cascade found anything at all in the text."""
        return self.finding is not None or bool(self.hits) or self.read_by_model


@frozen(kw_only=True)
class Review:
    """A reviewer's answer on one text.

    :ivar attack: whether the text is an attack.
    :ivar category: the attack's category (one of the scanner's categories; ``None`` for a benign text).
    :ivar reason: the reviewer's words, shown in the verdict's excerpt (kept short).
    """

    attack: bool
    category: str | None = None
    reason: str = ""

    def __attrs_post_init__(self) -> None:
        if self.attack and self.category not in CATEGORIES:
            raise InvalidRequest(
                f"a review that finds an attack names its category, one of {', '.join(CATEGORIES)}; "
                f"got {self.category!r}",
                field="category",
            )


@runtime_checkable
class Reviewer(Protocol):
    """A second reader (the builtin scanner's ``reviewer``): ``name`` appears in verdicts and logs."""

    name: str

    def review(self, text: str, draft: Draft) -> Review | None:
        """The answer on ``text`` (the text the rules scan), or ``None`` when there is none to give.

        Called from the scanner's threads at once (make it thread-safe); an exception is no answer
        (logged), never a verdict. A reviewer may also offer ``probe() -> str`` (a quick check, for
        ``memvault doctor``: ask about a few texts whose verdict is plain, say how it went and how fast; an
        exception is a failed check).
        """
        ...


@frozen(kw_only=True)
class ReviewPolicy:
    """When the scanner asks its reviewer, and which verdicts the reviewer may overturn.

    Read from the reviewer's table (``[scan.review]`` for memvault-scan-review) by :meth:`from_table`::

        scope = "suspicious"   # or "all": every text, not only those the cascade found something in
        may_clear = "meaning"  # or "none", or "all" (a rule's verdict too)
        unanswered = "store"   # or "refuse": a write the reviewer was asked about and did not answer fails

    ``unanswered = "refuse"`` closes the gap an attacker who keeps the reviewer busy (or down) would use:
    a write the cascade would store, but about which the reviewer was asked and gave no answer, raises
    :class:`~memvault.contract.errors.UpstreamError` (nothing written, no quarantine copy; retry later)
    instead of being stored on the cascade's word. Reads and recalls keep the cascade's verdict.
    """

    scope: Scope = "suspicious"
    may_clear: MayClear = "meaning"
    unanswered: Unanswered = "store"

    def asks(self, draft: Draft) -> bool:
        """Whether the reviewer's answer on a text with this draft can change its verdict."""
        if draft.finding is not None:
            return self.clears(draft)
        return self.scope == "all" or draft.suspicious

    def clears(self, draft: Draft) -> bool:
        """Whether a *benign* answer overturns the draft's rejection."""
        return self.may_clear == "all" or (self.may_clear == "meaning" and not draft.by_rules)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "scan.review") -> ReviewPolicy:
        """The ``scope``, ``may_clear`` and ``unanswered`` keys of ``table`` (other keys are the reviewer's own).

        :raises InvalidRequest: naming the key, for a value that is not one of the allowed ones.
        """
        scope = _choice(
            table,
            where,
            "scope",
            _SCOPES,
            "'suspicious' asks the reviewer about the texts the rules and the check by meaning found something "
            "in, 'all' about every text",
        )
        may_clear = _choice(
            table,
            where,
            "may_clear",
            _MAY_CLEAR,
            "which rejections a benign answer overturns: none, those resting on a model's evidence (the check "
            "by meaning, a classifier), or all (a rule's too)",
        )
        unanswered = _choice(
            table,
            where,
            "unanswered",
            _UNANSWERED,
            "what a write the reviewer gave no answer on gets: stored on the cascade's verdict, or refused "
            "(retry later)",
        )
        return cls(scope=scope, may_clear=may_clear, unanswered=unanswered)


def _choice(table: Mapping[str, Any], where: str, key: str, allowed: tuple[str, ...], meaning: str) -> Any:
    """``table[key]`` (default: the first of ``allowed``), one of ``allowed``, or ``InvalidRequest`` saying what
    the key means."""
    value = table.get(key, allowed[0])
    if value not in allowed:
        raise InvalidRequest(
            f"[{where}] {key} = {value!r} is not one of {', '.join(map(repr, allowed))}: {meaning}",
            field=f"{where}.{key}",
        )
    return value


def review_hit(review: Review, reviewer: str, length: int = 0) -> Hit:
    """The evidence an *attack* answer adds: weight 1.0 in its category, pattern ``review:<category>``, over
    the whole text the reviewer read (``length`` characters)."""
    if not review.attack or review.category is None:
        raise ValueError("review_hit takes an answer that finds an attack")
    # The model's words reach an error message, a log line and a terminal: printable characters only.
    reason = " ".join("".join(ch if ch.isprintable() else " " for ch in review.reason[:400]).split())[:160]
    return Hit(
        category=review.category,
        pattern=PATTERN_PREFIX + review.category,
        form="review",
        excerpt=f"the reviewer {reviewer!r} reads an attack" + (f": {reason}" if reason else ""),
        span=(0, length),
        weight=1.0,
    )
