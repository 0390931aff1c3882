"""memvault-scan-review: the ``reviewed`` scanner (issue 36).

The builtin scanner (rules, check by meaning, quarantine) with a second reader: a
chat model the operator runs, asked about the texts the builtin's cascade is unsure
of (:mod:`memvault.scanner.review`). Installing this distribution registers the
scanner; ``scanner = "reviewed"`` in ``memvault.toml`` selects it, and its
``[scan.review]`` table says where the model is::

    scanner = "reviewed"

    [scan.review]
    url = "http://127.0.0.1:11434/v1"   # any OpenAI-compatible chat completions endpoint
    model = "qwen2.5:7b-instruct"
    api_key_env = "MEMVAULT_REVIEW_KEY" # the variable holding the key, if the endpoint wants one
    scope = "suspicious"                # or "all"
    may_clear = "meaning"               # or "none", or "all"
    unanswered = "store"                # or "refuse": a write the model did not judge fails
    over = "builtin"                    # or "multilingual" (memvault-scan-multilingual's cascade)

The rest of ``[scan]`` applies as to the builtin scanner.
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from memvault.contract.errors import InvalidRequest, PluginError
from memvault.contract.registration import RegisterScanner
from memvault.hooks.markers import hookimpl
from memvault.scanner.engine import ScanPolicy
from memvault.scanner.plugin import BuiltinScanner
from memvault.scanner.review import REVIEW_PATTERN_IDS, ReviewPolicy
from memvault_scan_review.prompt import SYSTEM, parse_answer, render
from memvault_scan_review.reviewer import ChatReviewer, parts

__all__ = [
    "KEYS",
    "OVER",
    "SYSTEM",
    "ChatReviewer",
    "ReviewedScanner",
    "memvault_register_scanners",
    "parse_answer",
    "parts",
    "render",
    "reviewed_scanner",
]

#: The keys of ``[scan.review]``.
KEYS: Final = (
    "url",
    "model",
    "api_key_env",
    "timeout",
    "max_concurrent",
    "max_per_workspace",
    "max_per_caller",
    "max_chars",
    "max_parts",
    "json_mode",
    "scope",
    "may_clear",
    "unanswered",
    "over",
)
#: The scanners a reviewer can sit on (``[scan.review] over``).
OVER: Final = ("builtin", "multilingual")
_WHERE: Final = "scan.review"


class ReviewedScanner(BuiltinScanner):
    """The builtin scanner with :class:`ChatReviewer` as its reviewer.

    :param policy: the ``[scan]`` table of ``memvault.toml``, with its ``review`` sub-table.
    :param reviewer: the reviewer (default: a :class:`ChatReviewer` as ``[scan.review]`` says).
    :raises InvalidRequest: naming the bad key of ``[scan]`` or ``[scan.review]``.
    """

    def __init__(self, policy: Mapping[str, Any] | None = None, reviewer: ChatReviewer | None = None) -> None:
        table = dict(policy or {})
        review = table.pop("review", None)
        if review is None and reviewer is None:
            raise InvalidRequest(
                "scanner 'reviewed' needs a [scan.review] table in memvault.toml with at least url (an "
                'OpenAI-compatible endpoint, such as "http://127.0.0.1:11434/v1") and model',
                field=_WHERE,
            )
        if review is not None and not isinstance(review, Mapping):
            raise InvalidRequest("[scan] review must be a table ([scan.review])", field=_WHERE)
        settings = {key: value for key, value in (review or {}).items() if key != "over"}
        checked = ScanPolicy.from_table(table, REVIEW_PATTERN_IDS)
        #: The reviewer (``[scan.review]``'s, or the one given).
        self.chat = reviewer if reviewer is not None else chat_reviewer(settings)
        super().__init__(policy=checked, reviewer=self.chat, review=ReviewPolicy.from_table(settings, _WHERE))


def chat_reviewer(table: Mapping[str, Any]) -> ChatReviewer:
    """A :class:`ChatReviewer` from a ``[scan.review]`` table.

    :raises InvalidRequest: naming the key, for a missing, unknown or bad one.
    """
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        hint = (
            ": never write a key into memvault.toml; name the environment variable holding it with api_key_env"
            if "api_key" in unknown
            else ""
        )
        raise InvalidRequest(
            f"[scan.review] has unknown key(s) {', '.join(unknown)}; the keys are {', '.join(KEYS)}{hint}",
            field=_WHERE,
        )
    url = table.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidRequest(
            f"[scan.review] url = {url!r} is not an http:// or https:// URL: write the endpoint's base URL, "
            'such as "http://127.0.0.1:11434/v1" (the reviewer adds /chat/completions)',
            field=f"{_WHERE}.url",
        )
    if "@" in _netloc(url):
        raise InvalidRequest(
            "[scan.review] url holds a user name or password (user:key@host): never write a key into "
            "memvault.toml (it is also printed in the reviewer's warnings); name the environment variable "
            "holding it with api_key_env",
            field=f"{_WHERE}.url",
        )
    model = table.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest(
            f"[scan.review] model = {model!r} is not a model name: write the name the endpoint serves",
            field=f"{_WHERE}.model",
        )
    api_key = None
    env = table.get("api_key_env")
    if env is not None:
        if not isinstance(env, str) or not env:
            raise InvalidRequest(
                "[scan.review] api_key_env must name an environment variable", field=f"{_WHERE}.api_key_env"
            )
        api_key = os.environ.get(env)
        if not api_key:
            raise InvalidRequest(
                f"[scan.review] api_key_env names {env!r}, which is not set (or empty) in this process's "
                "environment: set it, or remove api_key_env for an endpoint without a key",
                field=f"{_WHERE}.api_key_env",
            )
    json_mode = table.get("json_mode", True)
    if not isinstance(json_mode, bool):
        raise InvalidRequest(
            f"[scan.review] json_mode = {json_mode!r} is not true or false", field=f"{_WHERE}.json_mode"
        )
    return ChatReviewer(
        url,
        model,
        api_key=api_key,
        timeout=_number(table, "timeout", 10.0, 0.0, 600.0),
        max_concurrent=int(_number(table, "max_concurrent", 4, 1, 256, integer=True)),
        max_per_workspace=(
            int(_number(table, "max_per_workspace", 1, 1, 256, integer=True)) if "max_per_workspace" in table else None
        ),
        max_per_caller=(
            int(_number(table, "max_per_caller", 1, 1, 256, integer=True)) if "max_per_caller" in table else None
        ),
        max_chars=int(_number(table, "max_chars", 8000, 500, 1_000_000, integer=True)),
        max_parts=int(_number(table, "max_parts", 4, 1, 64, integer=True)),
        json_mode=json_mode,
    )


def _netloc(url: str) -> str:
    """The host part of ``url`` (user info included), or ``""`` when it does not parse."""
    try:
        return urllib.parse.urlsplit(url).netloc
    except ValueError:
        return ""


def _number(
    table: Mapping[str, Any], key: str, default: float, low: float, high: float, *, integer: bool = False
) -> float:
    """``table[key]`` (or ``default``): a number in (low, high], or a whole number in [low, high]."""
    value = table.get(key, default)
    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        expected = f"a whole number from {low:g} to {high:g}"
    else:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and low < value <= high
        )
        expected = f"a number of seconds above {low:g} and at most {high:g}"
    if not ok:
        raise InvalidRequest(f"[scan.review] {key} = {value!r} is not {expected}", field=f"{_WHERE}.{key}")
    return float(value)


def reviewed_scanner(policy: Mapping[str, Any] | None = None) -> BuiltinScanner:
    """The ``reviewed`` scanner's factory: ``policy`` is the ``[scan]`` table of ``memvault.toml``.

    With ``[scan.review] over = "multilingual"`` the cascade is memvault-scan-multilingual's (its
    :class:`~memvault_scan_multilingual.MultilingualScanner` with the chat model as its reviewer).

    :raises InvalidRequest: naming the bad key of ``[scan]`` or ``[scan.review]``.
    :raises PluginError: for ``over = "multilingual"`` without memvault-scan-multilingual installed.
    """
    table = dict(policy or {})
    review = table.get("review")
    over = review.get("over", "builtin") if isinstance(review, Mapping) else "builtin"
    if over not in OVER:
        raise InvalidRequest(
            f"[scan.review] over = {over!r} is not one of {', '.join(map(repr, OVER))}: the scanner whose cascade "
            "the reviewer reads after",
            field=f"{_WHERE}.over",
        )
    if over == "builtin":
        return ReviewedScanner(table)
    try:
        from memvault_scan_multilingual import MultilingualScanner
    except ImportError as exc:
        raise PluginError(
            '[scan.review] over = "multilingual" needs memvault-scan-multilingual: pip install it (the README\'s '
            'first command does), or write over = "builtin"'
        ) from exc
    assert isinstance(review, Mapping)
    settings = {key: value for key, value in review.items() if key != "over"}
    table.pop("review")
    chat = chat_reviewer(settings)
    return MultilingualScanner(table, reviewer=chat, review=ReviewPolicy.from_table(settings, _WHERE))


@hookimpl
def memvault_register_scanners(register: RegisterScanner) -> None:
    register("reviewed", reviewed_scanner)
