"""Layer 1: the one cattrs converter for every JSON shape: HTTP wire, config, export files, quarantine records.

Unknown keys are rejected. A structuring failure becomes
:class:`~memvault.errors.InvalidRequest` naming the field (``providers.sqlite.path``);
a validator's own ``InvalidRequest`` passes through unchanged.

May import: :mod:`memvault.contract.errors`, :mod:`memvault.contract.embedding` and :mod:`memvault.contract.models`.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Final, TypeVar

import cattrs
from cattrs.errors import BaseValidationError, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from memvault.contract.embedding import QueryVector
from memvault.contract.errors import InvalidRequest
from memvault.contract.models import (
    DocumentInfo,
    ForgetResult,
    HealthStatus,
    ListDocumentsResult,
    QuarantineRecord,
    RecallRequest,
    RecallResult,
    RecallSnippet,
    RetainRequest,
)

__all__ = ["converter", "structure", "unstructure"]

_T = TypeVar("_T")

converter: Final = cattrs.Converter(forbid_extra_keys=True, prefer_attrib_converters=True)
converter.register_unstructure_hook(_dt.datetime, lambda value: value.isoformat())


_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})?", re.ASCII)


def _structure_datetime(value: object, _: type) -> _dt.datetime:
    if isinstance(value, _dt.datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected an RFC 3339 timestamp string, got {type(value).__name__}")
    # RFC 3339 allows any number of fraction digits, 'Z' and lowercase 't'/'z'; Python 3.10's
    # fromisoformat takes none of these, so normalise first (microseconds: 6 digits, truncated).
    match = _RFC3339.fullmatch(value)
    if match is None:
        return _dt.datetime.fromisoformat(value)
    date, time, fraction, offset = match.groups()
    micro = f".{(fraction or '')[:6]:0<6}" if fraction else ""
    zone = "+00:00" if offset in ("Z", "z") else (offset or "")
    return _dt.datetime.fromisoformat(f"{date}T{time}{micro}{zone}")


converter.register_structure_hook(_dt.datetime, _structure_datetime)


# Strict scalars: JSON and TOML carry real types, so "3" is not an int and 3 is not a str.
def _strict(kind: type, name: str) -> Any:
    def hook(value: object, _: type) -> object:
        if isinstance(value, bool) and kind is not bool:
            raise ValueError(f"expected {name}, got a boolean")
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind):
            raise ValueError(f"expected {name}, got {type(value).__name__}")
        return value

    return hook


for _kind, _name in ((str, "a string"), (int, "an integer"), (float, "a number"), (bool, "true or false")):
    converter.register_structure_hook(_kind, _strict(_kind, _name))


def _structure_recall_result(value: object, _: type) -> RecallResult:
    # hits is a list of RecallSnippet, but its attrs converter is a plain list():
    # structure each hit here so JSON objects become RecallSnippet values.
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    extra = set(value) - {"hits", "quarantined"}
    if extra:
        raise ForbiddenExtraKeysError("", RecallResult, extra)
    return RecallResult(
        hits=[converter.structure(hit, RecallSnippet) for hit in value.get("hits", [])],
        quarantined=converter.structure(value.get("quarantined", []), list[str]),
    )


converter.register_structure_hook(RecallResult, _structure_recall_result)


def _structure_list_documents_result(value: object, _: type) -> ListDocumentsResult:
    # Like RecallResult: the attrs converter sorts, it does not structure the items.
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    extra = set(value) - {"documents"}
    if extra:
        raise ForbiddenExtraKeysError("", ListDocumentsResult, extra)
    return ListDocumentsResult(documents=[converter.structure(doc, DocumentInfo) for doc in value.get("documents", [])])


converter.register_structure_hook(ListDocumentsResult, _structure_list_documents_result)


# Fields appended after the first release are left out while they hold their default, so a
# client of an earlier release (which rejects unknown keys) still reads the usual answers.
converter.register_unstructure_hook(
    ForgetResult, make_dict_unstructure_fn(ForgetResult, converter, pending=override(omit_if_default=True))
)
converter.register_unstructure_hook(
    HealthStatus,
    make_dict_unstructure_fn(
        HealthStatus,
        converter,
        pending_erasures=override(omit_if_default=True),
        embedding_backlog=override(omit_if_default=True),
        retention_overdue=override(omit_if_default=True),
    ),
)
converter.register_unstructure_hook(
    QuarantineRecord, make_dict_unstructure_fn(QuarantineRecord, converter, expires_at=override(omit_if_default=True))
)
converter.register_unstructure_hook(
    DocumentInfo, make_dict_unstructure_fn(DocumentInfo, converter, expires_at=override(omit_if_default=True))
)
converter.register_unstructure_hook(
    RecallSnippet,
    make_dict_unstructure_fn(
        RecallSnippet, converter, lexical=override(omit_if_default=True), similarity=override(omit_if_default=True)
    ),
)


# A recall's query vector never crosses the wire: a service embeds its callers' queries itself
# (P36), and a vector sent by a caller would rank with a model the service never ran.
converter.register_unstructure_hook(
    RecallRequest, make_dict_unstructure_fn(RecallRequest, converter, vector=override(omit=True))
)


# A write's retention never crosses the wire either (P43): it is the policy of the vault that
# applies it, and a service's vault sets its own; a caller's would let it outlive the service's
# policy. expires_at and idempotency_key do cross it, left out while unset (an earlier release
# rejects unknown keys).
converter.register_unstructure_hook(
    RetainRequest,
    make_dict_unstructure_fn(
        RetainRequest,
        converter,
        retention=override(omit=True),
        expires_at=override(omit_if_default=True),
        idempotency_key=override(omit_if_default=True),
    ),
)
converter.register_structure_hook(
    RetainRequest,
    make_dict_structure_fn(
        RetainRequest,
        converter,
        _cattrs_forbid_extra_keys=True,
        _cattrs_prefer_attrib_converters=True,
        retention=override(omit=True),
        expires_at=override(struct_hook=lambda value, _: None if value is None else _structure_datetime(value, _)),
    ),
)


def _no_query_vector(value: object, _: type) -> QueryVector:
    raise ValueError("a recall takes no 'vector' over the wire: the service embeds the query itself; remove the key")


converter.register_structure_hook(QueryVector, _no_query_vector)


def _first_invalid_request(exc: BaseException) -> InvalidRequest | None:
    if isinstance(exc, InvalidRequest):
        return exc
    for inner in getattr(exc, "exceptions", ()):  # exception groups (3.10: the backport)
        found = _first_invalid_request(inner)
        if found is not None:
            return found
    return None


def _describe(exc: BaseValidationError, root: str) -> tuple[str, str]:
    for inner in exc.exceptions:
        if isinstance(inner, ForbiddenExtraKeysError):
            keys = ", ".join(sorted(inner.extra_fields))
            return f"unknown key(s) {keys} in {root}: remove them or check their spelling", sorted(inner.extra_fields)[
                0
            ]
    messages = cattrs.transform_error(exc, path=root)
    first = messages[0] if messages else str(exc)
    field_path = first.split(" @ ", 1)[1] if " @ " in first else root
    return "; ".join(messages), field_path


def structure(data: Any, cls: type[_T], *, what: str = "$") -> _T:
    """Build ``cls`` from JSON-shaped ``data``.

    :param what: how the root is named in error messages (``"memvault.toml"``).
    :raises InvalidRequest: naming the offending field.
    """
    try:
        return converter.structure(data, cls)
    except InvalidRequest:
        raise
    except BaseValidationError as exc:
        inner = _first_invalid_request(exc)
        if inner is not None:
            raise inner from None
        message, field_path = _describe(exc, what)
        raise InvalidRequest(message, field=field_path) from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidRequest(f"{what}: {exc}") from None


def unstructure(obj: Any) -> Any:
    """JSON-shaped data (dicts, lists, strings, numbers) for ``obj``."""
    return converter.unstructure(obj)
