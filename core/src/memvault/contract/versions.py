"""Layer 1: the contract's versions, and the one a provider declares it targets.

Each line of docs/reference/contract.md carries the version that introduced it
or last tightened it (``[v1.2]``). A provider declares the version it was
written for when it registers (``register(..., contract_version="1.2")``); one
that declares none targets the first, ``1.0``. ``memvault parity NAME`` holds a
provider to every line up to its version and lists the newer lines it does not
meet yet without failing it (``--strict`` fails them too).

The versions, with what each added (docs/plugin-authors/versioning.md):

* ``1.0``: the contract of memvault 0.1.0;
* ``1.1``: D2 tightened (vault plugins checked at load), P33 (``checks_stored``);
* ``1.2``: P34 (``retain_many``), P35 (``os.fork()``), P24 widened (others' quarantine copies);
* ``1.3``: the lines added or tightened for memvault 0.2.0 after those.

May import: nothing of memvault.
"""

from __future__ import annotations

import re
from typing import Final

from memvault.contract.errors import InvalidRequest

__all__ = [
    "CONTRACT_VERSION",
    "CONTRACT_VERSIONS",
    "FIRST_CONTRACT_VERSION",
    "contract_version_key",
    "parse_contract_version",
]

#: Every contract version, oldest first.
CONTRACT_VERSIONS: Final = ("1.0", "1.1", "1.2", "1.3")
#: The version a provider that declares none targets.
FIRST_CONTRACT_VERSION: Final = CONTRACT_VERSIONS[0]
#: The newest contract version: what this memvault checks, and what a line added now is tagged with.
CONTRACT_VERSION: Final = CONTRACT_VERSIONS[-1]

_SHAPE = re.compile(r"(\d{1,3})\.(\d{1,3})")


def contract_version_key(version: str) -> tuple[int, int]:
    """``"1.10"`` -> ``(1, 10)``, for comparing versions as numbers, not as text."""
    match = _SHAPE.fullmatch(version)
    if match is None:
        raise ValueError(f"{version!r} is not a contract version (MAJOR.MINOR)")
    return int(match.group(1)), int(match.group(2))


def parse_contract_version(value: object, *, who: str = "a provider") -> str:
    """The contract version ``value`` names, checked.

    :param who: what declared it, for the message ("plugin 'x', provider 'y'").
    :raises InvalidRequest: for anything but one of :data:`CONTRACT_VERSIONS`, saying which exist.
    """
    if value is None:
        return FIRST_CONTRACT_VERSION
    if isinstance(value, str) and value in CONTRACT_VERSIONS:
        return value
    if (
        isinstance(value, str)
        and _SHAPE.fullmatch(value)
        and contract_version_key(value) > contract_version_key(CONTRACT_VERSION)
    ):
        raise InvalidRequest(
            f"{who} declares contract_version={value!r}, newer than this memvault knows ({CONTRACT_VERSION}): "
            f"upgrade memvault, or declare {CONTRACT_VERSION} or older",
            field="contract_version",
        )
    raise InvalidRequest(
        f"{who} declares contract_version={value!r}: give one of {', '.join(CONTRACT_VERSIONS)} as a string "
        "(the version of docs/reference/contract.md the provider was written for)",
        field="contract_version",
    )
