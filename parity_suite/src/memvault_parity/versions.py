"""Which contract version each standard test belongs to, and what a provider's version lets slide.

A provider declares the contract version it was written for
(``register(..., contract_version="1.2")``; none: ``1.0``). A standard test's
version is the newest version among the contract lines its docstring cites
(:data:`LINE_VERSIONS`, the ``[vX.Y]`` tags of docs/reference/contract.md), or
the one :func:`since` gives it: a test written for a line that was tightened
later keeps the version it was written for.

A test newer than the provider's version is a *new requirement*: when it fails
it is reported as not met yet (an xfail whose reason starts with
:data:`NEW_REQUIREMENT`), not as a failure, unless the suite runs strict (the
class attribute ``strict = True``, or ``memvault parity NAME --strict``). Our own
providers run strict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest

from memvault.contract.versions import (
    CONTRACT_VERSION,
    CONTRACT_VERSIONS,
    FIRST_CONTRACT_VERSION,
    contract_version_key,
)

__all__ = [
    "LINE_VERSIONS",
    "NEW_REQUIREMENT",
    "cited_lines",
    "line_version",
    "mark_new_requirements",
    "since",
    "version_of_test",
]

_F = TypeVar("_F", bound=Callable[..., Any])

#: The version that introduced or last tightened each contract line, for every line older
#: than :data:`memvault.CONTRACT_VERSION` (the tags of docs/reference/contract.md; a test
#: keeps the two equal). A line not listed is the newest version's: one added now.
LINE_VERSIONS: dict[str, str] = {
    **{f"P{n}": "1.0" for n in range(1, 33) if n not in (19, 24, 29)},
    "P24": "1.2",
    "P33": "1.1",
    "P34": "1.2",
    "P35": "1.2",
    **{f"L{n}": "1.0" for n in range(1, 15)},
    "D1": "1.0",
    "D2": "1.1",
    "D3": "1.0",
    "D4": "1.0",
}

#: How the reason of a new requirement's xfail starts (``memvault parity`` lists them apart).
NEW_REQUIREMENT = "new requirement in contract"

_LINE = re.compile(r"\b[PLD]\d{1,2}\b")
_SINCE = "_memvault_parity_since"


def line_version(line: str) -> str:
    """The version of contract line ``line`` (``"P35"`` -> ``"1.2"``)."""
    return LINE_VERSIONS.get(line, CONTRACT_VERSION)


def cited_lines(func: object) -> list[str]:
    """The contract lines a test's docstring cites, in contract order."""
    doc = getattr(func, "__doc__", None) or ""
    return sorted(set(_LINE.findall(doc)), key=lambda n: (n[0], int(n[1:])))


def since(version: str) -> Callable[[_F], _F]:
    """Give a standard test the contract version it was written for.

    Used on a test of a line that was tightened later: the test checks what the
    line required before, so it keeps that version (failing it is a failure for
    a provider written for that version).
    """
    if version not in CONTRACT_VERSIONS:
        raise ValueError(f"unknown contract version {version!r}; known: {', '.join(CONTRACT_VERSIONS)}")

    def mark(func: _F) -> _F:
        setattr(func, _SINCE, version)
        return func

    return mark


def version_of_test(func: object) -> str:
    """The contract version a standard test belongs to."""
    given = getattr(func, _SINCE, None)
    if isinstance(given, str):
        return given
    versions = [line_version(line) for line in cited_lines(func)]
    return max(versions, key=contract_version_key) if versions else FIRST_CONTRACT_VERSION


def _declared(cls: type) -> str:
    override = getattr(cls, "contract_version", None)
    if isinstance(override, str):
        return override
    from memvault.registry import get_registry

    try:
        return get_registry().get(str(getattr(cls, "provider", ""))).contract_version
    except Exception:  # noqa: BLE001 - an unknown provider fails in its own fixture, with its message
        return CONTRACT_VERSION


def mark_new_requirements(items: Iterable[pytest.Item]) -> None:
    """Mark each standard test newer than its provider's contract version as a new requirement.

    Idempotent; runs at collection so that a failure in a test's setup counts too.
    """
    from memvault_parity.base import SuiteBase

    for item in items:
        cls = getattr(item, "cls", None)
        func = getattr(item, "function", None)
        if cls is None or func is None or not issubclass(cls, SuiteBase) or getattr(item, _SINCE, False):
            continue
        setattr(item, _SINCE, True)
        if getattr(cls, "strict", False):
            continue
        needed, declared = version_of_test(func), _declared(cls)
        if contract_version_key(needed) > contract_version_key(declared):
            lines = ", ".join(line for line in cited_lines(func) if line_version(line) == needed) or "-"
            item.add_marker(
                pytest.mark.xfail(
                    reason=f"{NEW_REQUIREMENT} {needed} ({lines}); the provider declares {declared}",
                    strict=False,
                )
            )
