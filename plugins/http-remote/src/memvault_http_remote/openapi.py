"""The OpenAPI 3.1 document of the service, served at ``/v1/openapi.json``.

Written by hand from the :mod:`memvault.contract.models` types (their JSON shapes come
from :mod:`memvault.contract.wire`); a test validates real responses against it.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Any, Final

from memvault.contract.models import MAX_QUERY_BYTES, MAX_QUERY_TERMS, MAX_RECALL_LIMIT, MAX_SNIPPET_CHARS, Tier
from memvault_http_remote.errorwire import SERVICE_ERROR, WIRE_TYPES, wire_fields
from memvault_http_remote.settings import ServerSettings

__all__ = ["openapi_document"]

# The rules of contract P3 as JSON Schema patterns (ECMA-262 and Python alike; no
# lookaround): characters of [A-Za-z0-9._:@-], not starting with '.', never "..".
# A test checks them against the core's own validation.
_SEGMENTS: Final = r"[A-Za-z0-9_:@-]+(\.[A-Za-z0-9_:@-]+)*\.?"
_ID_PATTERN: Final = f"^{_SEGMENTS}$"
_ID: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "pattern": _ID_PATTERN,
    "description": "1-128 of [A-Za-z0-9._:@-], not starting with '.', without '..' (contract P3)",
}
_OPT_ID: Final = {**_ID, "minLength": 0, "pattern": f"^({_SEGMENTS})?$", "description": "an identifier, or empty"}
# A real calendar date, years 0001-9999 (what datetime.date accepts).
_MONTH_DAY: Final = (
    r"((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
)
_YEAR: Final = r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP_YEAR: Final = r"([0-9]{2}(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26]|0[48])00)"
_DATE: Final = f"({_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_DAILY_KEY: Final = {
    "type": "string",
    "pattern": f"^({_DATE})?$",
    "description": "YYYY-MM-DD, a real date; empty for today's UTC date",
}
_PEER_KEY: Final = {**_ID, "description": "the peer's slug (an identifier)"}
_ANY_KEY: Final = {"type": "string", "description": "ignored for this tier"}
_TIERS: Final = [t.value for t in Tier]
_AGENT_TIERS: Final = [t.value for t in Tier if t.is_agent_tier]
_PLAIN_AGENT_TIERS: Final = [t for t in _AGENT_TIERS if t not in (Tier.DAILY.value, Tier.PEERS.value)]
_TIME: Final = {"type": "string", "format": "date-time"}
DEFAULT_MAX_BATCH_ITEMS: Final[int] = ServerSettings().max_batch_items
# "A non-space character" as the core means it (str.strip / str.isspace), spelled out:
# \S differs between Python and ECMA-262 readings.
_NON_SPACE: Final = "[^" + "".join(f"\\u{i:04x}" for i in range(0x3001) if chr(i).isspace()) + "]"
_DIGEST: Final = {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "hex sha256 (64 lowercase)"}
_TEXT: Final = {"type": "string", "description": "text (JSON may not carry lone surrogates)"}
_LABEL: Final = {
    "type": "string",
    "anyOf": [
        {"enum": ["AGENT.md", "CREW.md", "PERSONA.md", "pins.md", "lessons.md"]},
        {"pattern": f"^daily/{_DATE}\\.md$"},
        {"pattern": f"^peers/{_SEGMENTS}\\.md$", "maxLength": len("peers/.md") + 128},
    ],
    "description": "a document label (contract P4)",
}


def _addressed(tiers: list[str], extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The variants of a request naming one document: tier, partition owner and key rules (P4, P7)."""
    agent = [t for t in tiers if t in _PLAIN_AGENT_TIERS]
    variants: list[dict[str, Any]] = []
    if agent:
        variants.append(
            {"properties": {"tier": {"enum": agent}, "agent_id": _ID, "key": _ANY_KEY}, "required": ["agent_id"]}
        )
    if Tier.DAILY.value in tiers:
        variants.append(
            {
                "properties": {"tier": {"const": Tier.DAILY.value}, "agent_id": _ID, "key": _DAILY_KEY},
                "required": ["agent_id"],
            }
        )
    if Tier.PEERS.value in tiers:
        variants.append(
            {
                "properties": {"tier": {"const": Tier.PEERS.value}, "agent_id": _ID, "key": _PEER_KEY},
                "required": ["agent_id", "key"],
            }
        )
    if Tier.CREW.value in tiers:
        variants.append(
            {
                "properties": {"tier": {"const": Tier.CREW.value}, "crew_id": _ID, "key": _ANY_KEY},
                "required": ["crew_id"],
            }
        )
    return variants


def _obj(properties: dict[str, Any], required: list[str], description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _json_type(hint: Any) -> dict[str, Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [_json_type(o) for o in typing.get_args(hint) if o is not type(None)]
        nullable = type(None) in typing.get_args(hint)
        return {"oneOf": [*options, {"type": "null"}]} if nullable else {"oneOf": options}
    if typing.get_origin(hint) is tuple:  # fixed length, one item type (ContentRejected.span)
        items = typing.get_args(hint)
        return {"type": "array", "items": _json_type(items[0]), "minItems": len(items), "maxItems": len(items)}
    if hint is float:
        return {"type": "number"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if typing.get_origin(hint) is list:
        return {"type": "array", "items": {"type": "string"}}
    return {"type": "string"}


def _error_body() -> dict[str, Any]:
    """The ``error`` object of an error body, derived from the codec: every class and every attribute it carries."""
    properties: dict[str, Any] = {
        "type": {
            "type": "string",
            "enum": [*WIRE_TYPES, SERVICE_ERROR],
            "description": "the memvault.errors class the service or its provider raised",
        },
        "message": {"type": "string", "description": "what was wrong and how to fix it"},
    }
    for cls in WIRE_TYPES.values():
        fields = wire_fields(cls)
        hints = typing.get_type_hints(cls.__init__) if fields else {}
        for name in fields:
            entry = properties.setdefault(name, {**_json_type(hints.get(name)), "description": ""})
            entry["description"] = ", ".join(filter(None, [entry["description"], cls.__name__]))
    return {"type": "object", "properties": properties, "required": ["type", "message"], "additionalProperties": False}


_ERROR_BODY: Final = _error_body()


_SCHEMAS: Final[dict[str, Any]] = {
    "RetainRequest": {
        **_obj(
            {
                "workspace_id": _ID,
                "agent_id": _OPT_ID,
                "crew_id": _OPT_ID,
                "tier": {"type": "string", "enum": [t for t in _TIERS if t != Tier.LESSONS.value]},
                "key": {"type": "string", "description": "daily: YYYY-MM-DD or empty for today; peers: the slug"},
                "content": {**_TEXT, "minLength": 1},
                "mode": {"type": "string", "enum": ["replace", "append"]},
                "data_subject_id": _OPT_ID,
                "expires_at": {
                    "oneOf": [_TIME, {"type": "null"}],
                    "description": "optional (P41): when the whole document expires, ISO-8601 with a UTC offset "
                    "(2026-05-01T00:00:00+00:00), in the future (a time past is a 400); it is absent for every "
                    "verb from then. null or absent: no expiry",
                },
                "idempotency_key": {
                    **_OPT_ID,
                    "description": "optional (P44): a repeat with the same key and the same request returns the "
                    "first result and writes nothing; the same key with another request is a 409 "
                    "IdempotencyConflict. Keys are kept for the service's idempotency window (24 h by default)",
                },
            },
            ["workspace_id", "tier", "content", "mode"],
            "Store content in one document (contract P5-P13, P41, P44). The lessons tier is read-only here.",
        ),
        "oneOf": _addressed([t for t in _TIERS if t != Tier.LESSONS.value]),
    },
    "RetainResult": _obj(
        {"id": {"type": "string"}, "bytes": {"type": "integer", "minimum": 0}, "warning": {"type": "string"}},
        ["id", "bytes", "warning"],
    ),
    "RetainBatchRequest": _obj(
        {
            "items": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"$ref": "#/components/schemas/RetainRequest"},
                        {"description": "anything else is answered too: that item alone fails, with its 400"},
                    ]
                },
                "minItems": 1,
                "maxItems": DEFAULT_MAX_BATCH_ITEMS,
                "description": f"1 to server.max_batch_items ({DEFAULT_MAX_BATCH_ITEMS} by default) retain requests, "
                "retained in order; each counts as one request against the caller's concurrency bound",
            },
            "independent": {
                "type": "boolean",
                "default": False,
                "description": "the items come from callers that did not wait for one another (the client's "
                "coalesced appends), so their order does not matter: a provider that commits each retain alone "
                "then runs them at once, as separate requests would run",
            },
        },
        ["items"],
        "Several retains in one call (contract P34): each item is checked and retained as by /v1/retain and "
        "fails alone.",
    ),
    "RetainBatchResult": _obj(
        {
            "results": {
                "type": "array",
                "items": {
                    "oneOf": [
                        _obj(
                            {"result": {"$ref": "#/components/schemas/RetainResult"}}, ["result"], "the item's result"
                        ),
                        _obj(
                            {
                                "status": {
                                    "type": "integer",
                                    "enum": [400, 403, 409, 422, 500, 502, 504],
                                    "description": "the status /v1/retain would have answered for this item",
                                },
                                "error": _ERROR_BODY,
                            },
                            ["status", "error"],
                            "the item's error: the body /v1/retain would have answered for it, with its status",
                        ),
                    ]
                },
            }
        },
        ["results"],
        "One outcome per item, in the items' order.",
    ),
    "RecallRequest": {
        **_obj(
            {
                "workspace_id": _ID,
                "agent_id": _OPT_ID,
                "crew_id": _OPT_ID,
                "query": {
                    **_TEXT,
                    "minLength": 1,
                    "maxLength": MAX_QUERY_BYTES,
                    "pattern": _NON_SPACE,
                    "description": f"what to look for: a non-space character, at most {MAX_QUERY_BYTES} UTF-8 "
                    f"bytes and {MAX_QUERY_TERMS} distinct search terms (contract P14; maxLength counts "
                    "characters, the service counts bytes and terms too)",
                },
                "tier": {"enum": [*_TIERS, "", None], "description": "null or empty: every tier the caller can read"},
                "limit": {"type": "integer", "description": f"advisory: <= 0 or > {MAX_RECALL_LIMIT} means 20"},
            },
            ["workspace_id", "query"],
            "Search the caller's partitions line by line (contract P14-P20).",
        ),
        "anyOf": [
            {
                "properties": {"tier": {"enum": ["", None]}},
                "anyOf": [
                    {"properties": {"agent_id": _ID}, "required": ["agent_id"]},
                    {"properties": {"crew_id": _ID}, "required": ["crew_id"]},
                ],
            },
            {"properties": {"tier": {"enum": _AGENT_TIERS}, "agent_id": _ID}, "required": ["tier", "agent_id"]},
            {"properties": {"tier": {"const": Tier.CREW.value}, "crew_id": _ID}, "required": ["tier", "crew_id"]},
        ],
    },
    "RecallSnippet": _obj(
        {
            "source": {"type": "string"},
            "line": {"type": "integer", "minimum": 1},
            "snippet": {"type": "string", "maxLength": MAX_SNIPPET_CHARS},
            "digest": {"type": "string", "description": "sha256 of the source document's body, or empty"},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "lexical": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": "recall by meaning (P39): the line's lexical score, 0 when it shares no term; "
                "absent from a recall by words only",
            },
            "similarity": {
                "type": ["number", "null"],
                "minimum": 0,
                "maximum": 1,
                "description": "recall by meaning (P39): the line's cosine similarity to the query, clipped to "
                "[0, 1]; null for a line not embedded yet; absent from a recall by words only",
            },
        },
        ["source", "line", "snippet", "score"],
    ),
    "RecallResult": _obj(
        {
            "hits": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/RecallSnippet"},
                "maxItems": MAX_RECALL_LIMIT,
            },
            "quarantined": {"type": "array", "items": {"type": "string"}},
        },
        ["hits", "quarantined"],
    ),
    "ReadRequest": {
        **_obj(
            {
                "workspace_id": _ID,
                "agent_id": _OPT_ID,
                "crew_id": _OPT_ID,
                "tier": {"type": "string", "enum": _TIERS},
                "key": {"type": "string", "description": "daily: YYYY-MM-DD or empty for today; peers: the slug"},
            },
            ["workspace_id", "tier"],
            "Read one whole document (contract P21).",
        ),
        "oneOf": _addressed(_TIERS),
    },
    "Quarantine": _obj(
        {"category": {"type": "string"}, "pattern": {"type": "string"}, "sha256": {"type": "string"}},
        ["category", "pattern", "sha256"],
    ),
    "ReadResult": _obj(
        {
            "id": {"type": "string"},
            "content": {"type": "string"},
            "quarantine": {"oneOf": [{"$ref": "#/components/schemas/Quarantine"}, {"type": "null"}]},
        },
        ["id", "content", "quarantine"],
    ),
    "ForgetRequest": {
        **_obj(
            {
                "workspace_id": _ID,
                "agent_id": _OPT_ID,
                "crew_id": _OPT_ID,
                "id": {"type": "string", "description": "a document label (AGENT.md, daily/2026-01-31.md, ...)"},
                "data_subject_id": _OPT_ID,
            },
            ["workspace_id"],
            "Remove a document by label, or every document of a data subject (P22-P24): exactly one of the two.",
        ),
        "oneOf": [
            {
                "properties": {"id": {"const": "CREW.md"}, "crew_id": _ID, "data_subject_id": {"const": ""}},
                "required": ["id", "crew_id"],
            },
            {
                "properties": {
                    "id": {**_LABEL, "not": {"const": "CREW.md"}},
                    "agent_id": _ID,
                    "data_subject_id": {"const": ""},
                },
                "required": ["id", "agent_id"],
            },
            {"properties": {"id": {"const": ""}, "data_subject_id": _ID}, "required": ["data_subject_id"]},
        ],
    },
    "ForgetResult": _obj(
        {
            "removed": {"type": "integer", "minimum": 0},
            "pending": {
                "type": "boolean",
                "description": "true: removed from view, but the text may still be in the store's files; the "
                "provider finishes the scrub later and repeating the same forget finishes it (P24). Absent "
                "means false (complete).",
            },
        },
        ["removed"],
    ),
    "HealthStatus": _obj(
        {
            "ok": {"type": "boolean"},
            "message": {"type": "string"},
            "checked_at": _TIME,
            "pending_erasures": {
                "type": "integer",
                "minimum": 0,
                "description": "erasures whose scrub from the store's files is still pending (P24); absent means 0",
            },
            "embedding_backlog": {
                "type": "integer",
                "minimum": 0,
                "description": "lines waiting for a vector of the service's embedder (P37); found by their words "
                "meanwhile; absent means 0",
            },
            "retention_overdue": {
                "type": "integer",
                "minimum": 0,
                "description": "documents past their expiry that the sweep has not removed yet (P43); absent from "
                "every verb already; absent means 0",
            },
        },
        ["ok", "message", "checked_at"],
    ),
    "Capabilities": _obj(
        {
            "provider": {"type": "string"},
            "capabilities": {"type": "array", "items": {"type": "string"}},
            "recall_by_meaning": {
                "oneOf": [
                    _obj(
                        {
                            "embedder": {"type": "string", "description": "the embedder's registered name"},
                            "model_id": {"type": "string", "description": "its exact model (P38)"},
                        },
                        ["embedder", "model_id"],
                    ),
                    {"type": "null"},
                ],
                "description": "the embedder this service's recall fuses meaning in with (P36), or null: it "
                "recalls by words alone. Absent from an older service: read it as null",
            },
        },
        ["provider", "capabilities"],
    ),
    "ListDocumentsRequest": _obj(
        {
            "workspace_id": {
                **_OPT_ID,
                "description": "the workspace to list; empty: every workspace (needs a token for '*')",
            },
            "agent_id": _OPT_ID,
            "crew_id": _OPT_ID,
            "tier": {
                "oneOf": [{"type": "string", "enum": ["", *_TIERS]}, {"type": "null"}],
                "description": "one tier; empty or null: every tier",
            },
        },
        [],
        "Enumerate stored documents without their bodies (contract P32).",
    ),
    "DocumentInfo": _obj(
        {
            "workspace_id": _ID,
            "agent_id": _OPT_ID,
            "crew_id": _OPT_ID,
            "tier": {"type": "string", "enum": _TIERS},
            "label": _LABEL,
            "bytes": {"type": "integer", "minimum": 0},
            "subjects": {"type": "array", "items": _ID},
            "digest": {**_DIGEST, "description": "hex sha256 of the body's UTF-8 bytes"},
            "updated_at": {"oneOf": [_TIME, {"type": "null"}]},
            "expires_at": {
                "oneOf": [_TIME, {"type": "null"}],
                "description": "when the document expires (P41); absent or null: never",
            },
        },
        ["workspace_id", "agent_id", "crew_id", "tier", "label", "bytes", "subjects", "digest", "updated_at"],
    ),
    "ListDocumentsResult": _obj(
        {"documents": {"type": "array", "items": {"$ref": "#/components/schemas/DocumentInfo"}}},
        ["documents"],
        "Sorted by workspace_id, crew_id, agent_id, label.",
    ),
    "QuarantineRecord": _obj(
        {
            "workspace_id": _ID,
            "agent_id": _OPT_ID,
            "crew_id": _OPT_ID,
            "label": _LABEL,
            "category": _TEXT,
            "pattern": _TEXT,
            "sha256": _DIGEST,
            "content": _TEXT,
            "created_at": _TIME,
            "data_subject_id": _OPT_ID,
            "expires_at": {
                "oneOf": [_TIME, {"type": "null"}],
                "description": "when the copy expires (P42): the rejected write's expiry or its tier's retention; "
                "absent or null: never",
            },
        },
        ["workspace_id", "label", "category", "pattern", "sha256", "content"],
    ),
    "QuarantineKept": _obj({"kept": {"type": "boolean"}}, ["kept"]),
    "QuarantineListRequest": _obj({"workspace_id": _ID}, ["workspace_id"]),
    "QuarantineList": _obj(
        {
            "records": {
                "oneOf": [
                    {"type": "array", "items": {"$ref": "#/components/schemas/QuarantineRecord"}},
                    {"type": "null"},
                ]
            }
        },
        ["records"],
    ),
    "QuarantineGetRequest": _obj({"workspace_id": _ID, "sha256": _DIGEST}, ["workspace_id", "sha256"]),
    "QuarantineGot": _obj(
        {"record": {"oneOf": [{"$ref": "#/components/schemas/QuarantineRecord"}, {"type": "null"}]}},
        ["record"],
    ),
    "Error": _obj({"error": _ERROR_BODY}, ["error"], "Every non-2xx answer of the service."),
}

_ERROR_TEXT: Final = {
    "400": "InvalidRequest: bad JSON (lone surrogates, integers over 4300 digits) or a request breaking the contract",
    "401": "Unauthorized: no bearer token, or an unknown one",
    "403": "Unauthorized: the token is not bound to that workspace (existence is never revealed)",
    "408": "InvalidRequest: the request head or body did not arrive within the body timeout (server.body_timeout)",
    "409": "CapExceeded: the document would exceed its tier's cap; or IdempotencyConflict: the idempotency "
    "key was used for another write",
    "413": "InvalidRequest: the body is over the service's limit",
    "422": "ContentRejected by the scanner, or NotSupported by the provider",
    "500": "ServiceError/UpstreamError: a bug in the provider or the service",
    "502": "UpstreamError: the provider's storage failed",
    "503": "UpstreamError: too many requests in flight (in total, for this token, or without a token); retry shortly",
    "503-batch": "UpstreamError: too many requests in flight (in total, for this token, or without a token), a "
    "batch's items each counting as one; retry shortly, or send fewer items per batch",
    "504": "UpstreamTimeout: the provider did not answer within the request timeout",
}


def _error(status: str, text: str = "") -> dict[str, Any]:
    return {
        "description": _ERROR_TEXT[text or status],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _ok(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


def _post(op_id: str, summary: str, request: str, result: str, errors: list[str]) -> dict[str, Any]:
    return {
        "post": {
            "operationId": op_id,
            "summary": summary,
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{request}"}}},
            },
            "responses": {"200": _ok(result, "the result"), **{s: _error(s) for s in errors}},
        }
    }


_COMMON: Final = ["400", "401", "403", "408", "413", "500", "502", "503", "504"]


def _build() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memvault service",
            "version": "1",
            "description": "Pluggable long-term memory for AI agents, over JSON. Served by `memvault serve`.",
        },
        "paths": {
            "/v1/retain": _post(
                "retain", "Store content in one document", "RetainRequest", "RetainResult", [*_COMMON, "409", "422"]
            ),
            "/v1/retain/batch": _post(
                "retain_batch",
                "Store several retains in order, one outcome each (per-item errors answer 200)",
                "RetainBatchRequest",
                "RetainBatchResult",
                [s for s in _COMMON if s != "403"],
            ),
            "/v1/recall": _post(
                "recall", "Search for lines matching a query", "RecallRequest", "RecallResult", [*_COMMON, "422"]
            ),
            "/v1/read": _post("read", "Read one whole document", "ReadRequest", "ReadResult", [*_COMMON, "422"]),
            "/v1/forget": _post(
                "forget", "Remove a document or a data subject", "ForgetRequest", "ForgetResult", [*_COMMON, "422"]
            ),
            "/v1/documents/list": _post(
                "list_documents",
                "Enumerate documents (sizes, subjects, digests; no bodies)",
                "ListDocumentsRequest",
                "ListDocumentsResult",
                [*_COMMON, "422"],
            ),
            "/v1/quarantine/keep": _post(
                "quarantine_keep",
                "Keep a copy of rejected content",
                "QuarantineRecord",
                "QuarantineKept",
                [*_COMMON, "422"],
            ),
            "/v1/quarantine/list": _post(
                "quarantine_list",
                "List a workspace's quarantine copies",
                "QuarantineListRequest",
                "QuarantineList",
                [*_COMMON, "422"],
            ),
            "/v1/quarantine/get": _post(
                "quarantine_get",
                "One quarantine copy by sha256",
                "QuarantineGetRequest",
                "QuarantineGot",
                [*_COMMON, "422"],
            ),
            "/v1/health": {
                "get": {
                    "operationId": "health",
                    "summary": "Probe the provider (no token needed; says nothing about tenants)",
                    "responses": {
                        "200": _ok("HealthStatus", "the provider's health"),
                        "401": _error("401"),
                        "503": _error("503"),
                    },
                }
            },
            "/v1/capabilities": {
                "get": {
                    "operationId": "capabilities",
                    "summary": "The provider's name and declared capabilities, and whether recall ranks by meaning",
                    "security": [{"bearer": []}],
                    "responses": {
                        "200": _ok("Capabilities", "name and capabilities"),
                        "401": _error("401"),
                        "503": _error("503"),
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {"200": {"description": "the OpenAPI 3.1 document"}},
                }
            },
        },
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _with_batch_503(document: dict[str, Any]) -> dict[str, Any]:
    document["paths"]["/v1/retain/batch"]["post"]["responses"]["503"] = _error("503", "503-batch")
    return document


def _links(document: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI links from a retain to what reads, searches and forgets the document it wrote.

    They say how the operations chain (schemathesis's stateful phase follows them):
    a retain's workspace and tier are what ``read`` addresses; its ``id`` is what
    ``forget`` removes; its workspace is where ``recall`` searches, for what it wrote.
    """
    # Only fields every retain the service accepts carries: a link naming a field the retain left out
    # (agent_id on a crew tier, crew_id on an agent tier, key) cannot be resolved, and the tool then
    # reports the link as broken. The target's other fields are the tool's own.
    partition = {name: f"$request.body#/{name}" for name in ("workspace_id", "tier")}
    owner = {"workspace_id": "$request.body#/workspace_id"}
    links = {
        "ReadTheRetainedDocument": {
            "operationId": "read",
            "requestBody": partition,
            "description": "The document this retain wrote, whole.",
        },
        "RecallFromTheRetainedDocument": {
            "operationId": "recall",
            "requestBody": {**owner, "query": "$request.body#/content"},
            "description": "A search of the workspace this retain wrote to, for what it wrote.",
        },
        "ForgetTheRetainedDocument": {
            "operationId": "forget",
            "requestBody": {**owner, "id": "$response.body#/id"},
            "description": "Forget the document this retain wrote (its id is the result's id).",
        },
    }
    document["paths"]["/v1/retain"]["post"]["responses"]["200"]["links"] = links
    return document


def openapi_document(settings: ServerSettings | None = None) -> dict[str, Any]:
    """A fresh copy of the document (callers may mutate it), its limits those of ``settings``.

    :param settings: the service's settings (their defaults when ``None``): the
        document states the batch size the service will take with them
        (:attr:`ServerSettings.batch_items_limit`), never more.
    """
    document = copy.deepcopy(_DOCUMENT)
    limit = (settings or _DEFAULT_SETTINGS).batch_items_limit
    items = document["components"]["schemas"]["RetainBatchRequest"]["properties"]["items"]
    items["maxItems"] = limit
    items["description"] = (
        f"1 to {limit} retain requests (with this service's settings: server.max_batch_items, and no more "
        "than server.max_per_token and server.max_concurrent, since each item counts as one request in "
        "flight), retained in order; more is a 400 that names the limit"
    )
    return document


_DEFAULT_SETTINGS: Final = ServerSettings()
_DOCUMENT: Final = _links(_with_batch_503(_build()))
