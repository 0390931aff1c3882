"""Limits: body cap (413, checked while streaming), concurrency bound (503), request timeout (504)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from httpremote_support import SlowProvider

import memvault
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenStore

RECALL = {"workspace_id": "w1", "agent_id": "a1", "query": "anything"}


def _app(provider: Any = None, **limits: Any) -> Any:
    vault = memvault.Vault(provider or SlowProvider(delay=0.0), name="slow")
    return create_app(vault, ServerSettings(**limits), TokenStore([]))


def _chunked_recall_scope() -> dict[str, Any]:
    """An ASGI scope for POST /v1/recall whose body has no declared length."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/recall",
        "raw_path": b"/v1/recall",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8765),
    }


async def _post(app: Any, path: str, body: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
        return await client.post(path, json=body)


def test_body_over_the_cap_is_413_by_its_declared_length() -> None:
    body = {**RECALL, "query": "x" * 2000}
    response = asyncio.run(_post(_app(max_body_bytes=1000), "/v1/recall", body))
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "InvalidRequest"


def test_body_at_the_cap_is_accepted() -> None:
    raw = json.dumps(RECALL)
    response = asyncio.run(_post(_app(max_body_bytes=len(raw)), "/v1/recall", RECALL))
    assert response.status_code == 200, response.text


def test_streamed_body_is_refused_before_it_is_all_read() -> None:
    """413 comes after about cap/chunk chunks of an undeclared-length body, not after all of them."""
    app = _app(max_body_bytes=64 * 1024)
    chunk = b"x" * 16 * 1024
    total_chunks = 200
    pulled = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": pulled < total_chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(_chunked_recall_scope(), receive, send))
    assert sent[0]["status"] == 413
    assert pulled <= 64 // 16 + 1


def test_requests_past_the_concurrency_bound_get_503() -> None:
    """Two slots: of three simultaneous slow recalls, two succeed and one is refused at once."""
    app = _app(SlowProvider(delay=0.5), max_concurrent=2)

    async def burst() -> list[int]:
        responses = await asyncio.gather(*(_post(app, "/v1/recall", RECALL) for _ in range(3)))
        return sorted(r.status_code for r in responses)

    assert asyncio.run(burst()) == [200, 200, 503]


def test_503_body_is_a_typed_upstream_error_with_retry_after() -> None:
    app = _app(SlowProvider(delay=0.3), max_concurrent=1)

    async def burst() -> list[httpx.Response]:
        return list(await asyncio.gather(*(_post(app, "/v1/recall", RECALL) for _ in range(2))))

    refused = [r for r in asyncio.run(burst()) if r.status_code == 503]
    assert len(refused) == 1
    assert refused[0].json()["error"]["type"] == "UpstreamError"
    assert refused[0].headers["retry-after"] == "1"


def test_provider_slower_than_the_request_timeout_is_504_upstream_timeout() -> None:
    response = asyncio.run(_post(_app(SlowProvider(delay=1.0), request_timeout=0.2), "/v1/recall", RECALL))
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "UpstreamTimeout"


def test_body_trickling_past_the_body_timeout_is_408() -> None:
    """A slow client cannot hold a concurrency slot forever by sending its body slowly."""
    app = _app(body_timeout=0.3)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.2)
        return {"type": "http.request", "body": b" ", "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(app(_chunked_recall_scope(), receive, send), timeout=5))
    assert sent[0]["status"] == 408


def test_a_call_past_the_timeout_keeps_its_slot_until_it_returns() -> None:
    """max_concurrent 1, recalls of 1 s, a timeout of 0.2 s: 504, then 503 while the abandoned call
    still runs in its thread (before: a second thread started at once), then, once it returned, the
    next recall is let in again (and times out in its turn)."""
    app = _app(SlowProvider(delay=1.0), max_concurrent=1, request_timeout=0.2)

    async def run() -> list[tuple[int, str]]:
        answers = []
        for wait in (0.0, 0.0, 1.2):
            await asyncio.sleep(wait)
            response = await _post(app, "/v1/recall", RECALL)
            answers.append((response.status_code, response.headers.get("retry-after", "")))
        return answers

    assert asyncio.run(run()) == [(504, ""), (503, "1"), (504, "")]
    assert (app.in_flight, app.per_client) == (0, {})
