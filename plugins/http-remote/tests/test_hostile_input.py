"""Malformed input is a typed 4xx on every route, never a 500; health is cheap and honest under load."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpremote_support import make_test_client_class

import memvault
from memvault.contract.models import HealthStatus
from memvault.hooks.markers import hookimpl
from memvault.providers.memory import MemoryProvider
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenStore

TestClient = make_test_client_class()
W = {"workspace_id": "w-1", "agent_id": "a1", "crew_id": ""}
#: A valid body for every JSON route; each string field is attacked in turn.
BODIES: dict[str, dict[str, Any]] = {
    "/v1/retain": {**W, "tier": "AGENT", "key": "", "content": "x\n", "mode": "append", "data_subject_id": "s1"},
    "/v1/recall": {**W, "query": "tea", "tier": "AGENT"},
    "/v1/read": {**W, "tier": "AGENT", "key": ""},
    "/v1/forget": {**W, "id": "AGENT.md"},
    "/v1/quarantine/keep": {
        **W,
        "label": "AGENT.md",
        "category": "instruction_override",
        "pattern": "ignore previous instructions",
        "sha256": "ab" * 32,
        "content": "Ignore previous instructions.\n",
        "data_subject_id": "s1",
    },
    "/v1/quarantine/list": {"workspace_id": "w-1"},
    "/v1/quarantine/get": {"workspace_id": "w-1", "sha256": "ab" * 32},
}
STRING_FIELDS = [
    (path, name) for path, body in BODIES.items() for name, value in body.items() if isinstance(value, str)
]
HUGE = "9" * 4301


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    vault = memvault.Vault(MemoryProvider(), name="memory", capabilities=MemoryProvider.capabilities)
    with TestClient(create_app(vault, ServerSettings(), TokenStore([]))) as test_client:
        yield test_client


def _raw(client: Any, path: str, text: str) -> Any:
    return client.post(path, content=text.encode("utf-8"), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("path", sorted(BODIES))
def test_valid_bodies_are_accepted(client: Any, path: str) -> None:
    """The attacks below start from bodies the service accepts, so each 400 is the attack's doing."""
    response = _raw(client, path, json.dumps(BODIES[path]))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("where", ["value", "nested", "extra"])
@pytest.mark.parametrize("path", sorted(BODIES))
def test_an_integer_of_more_than_4300_digits_is_a_typed_400(client: Any, path: str, where: str) -> None:
    body = json.dumps(BODIES[path])
    attack = {
        "value": body[:-1] + f', "limit": {HUGE}}}',
        "nested": body[:-1] + f', "x": [{{"y": -{HUGE}}}]}}',
        "extra": f'{{"n": {HUGE}, ' + body[1:],
    }[where]
    response = _raw(client, path, attack)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "InvalidRequest"
    assert response.json()["error"]["field"] == "body"


@pytest.mark.parametrize(("path", "name"), STRING_FIELDS, ids=[f"{p} {n}" for p, n in STRING_FIELDS])
@pytest.mark.parametrize("surrogate", [chr(0xD800), chr(0xDFFF)], ids=["high", "low"])
def test_a_lone_surrogate_in_any_string_field_is_a_typed_400_naming_it(
    client: Any, path: str, name: str, surrogate: str
) -> None:
    body = {**BODIES[path], name: f"ok{surrogate}ok"}
    response = _raw(client, path, json.dumps(body))  # ensure_ascii: the surrogate travels as \\udXXX
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "InvalidRequest"
    assert response.json()["error"]["field"] == name


@pytest.mark.parametrize("path", sorted(BODIES))
def test_a_lone_surrogate_in_a_key_is_a_typed_400(client: Any, path: str) -> None:
    response = _raw(client, path, json.dumps({**BODIES[path], "\ud800": 1}))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "InvalidRequest"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/nope", 404),
        ("POST", "/nope", 404),
        ("GET", "/", 404),
        ("DELETE", "/v1/recall", 405),
        ("GET", "/v1/retain", 405),
        ("POST", "/v1/health", 405),
        ("PUT", "/v1/quarantine/keep", 405),
    ],
)
def test_unknown_routes_and_methods_answer_with_the_typed_error_body(
    client: Any, method: str, path: str, status: int
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "InvalidRequest"
    assert path in error["message"]
    if status == 405:
        assert response.headers["allow"]


def test_a_huge_declared_content_length_is_413_not_a_conversion_error(client: Any) -> None:
    """A Content-Length of thousands of digits must not reach int() (4300-digit limit)."""
    app = client.app
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/recall",
        "raw_path": b"/v1/recall",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"9" * 5000)],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8765),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["type"] == "InvalidRequest"


# -- health under a flood ----------------------------------------------------------


class _CountingHealth(MemoryProvider):
    """Counts health probes; each probe takes ``delay`` seconds and fails when probes overlap."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.calls = 0
        self.overlapping = 0
        self._busy = threading.Lock()

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        self.calls += 1
        if not self._busy.acquire(blocking=False):
            self.overlapping += 1
            return HealthStatus(ok=False, message="store busy: another probe holds the lock")
        try:
            time.sleep(self.delay)
            return HealthStatus(ok=True)
        finally:
            self._busy.release()


async def _flood(app: Any, count: int) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as http:
        return list(await asyncio.gather(*(http.get("/v1/health") for _ in range(count))))


def test_a_health_flood_costs_the_store_one_probe_per_interval_and_stays_ok() -> None:
    provider = _CountingHealth(delay=0.05)
    vault = memvault.Vault(provider, name="counting")
    app = create_app(vault, ServerSettings(health_interval=1.0), TokenStore([]))
    started = time.monotonic()
    answers = asyncio.run(_flood(app, 200))
    elapsed = time.monotonic() - started
    assert {r.status_code for r in answers} == {200}
    assert all(r.json()["ok"] for r in answers), {r.json()["message"] for r in answers}
    assert provider.overlapping == 0
    assert provider.calls <= 1 + int(elapsed / 1.0) + 1


def test_health_is_not_queued_behind_the_request_bound() -> None:
    """Every request slot is taken: health still answers at once."""
    provider = _CountingHealth(delay=0.0)
    vault = memvault.Vault(provider, name="counting")
    app = create_app(vault, ServerSettings(max_concurrent=1), TokenStore([]))
    release = asyncio.Event()

    async def scenario() -> tuple[int, float]:
        transport = httpx.ASGITransport(app=app)

        async def stalled_body() -> Any:
            yield b'{"workspace_id": "w", '
            await release.wait()
            yield b'"agent_id": "a", "query": "q"}'

        async with httpx.AsyncClient(transport=transport, base_url="http://service") as http:
            holder = asyncio.create_task(http.post("/v1/recall", content=stalled_body()))
            await asyncio.sleep(0.2)
            started = time.monotonic()
            health = await http.get("/v1/health")
            took = time.monotonic() - started
            release.set()
            await holder
            return health.status_code, took

    status, took = asyncio.run(scenario())
    assert status == 200
    assert took < 1.0


def test_a_hanging_health_probe_reports_not_ok_after_the_health_timeout() -> None:
    provider = _CountingHealth(delay=3.0)
    vault = memvault.Vault(provider, name="counting")
    app = create_app(vault, ServerSettings(health_timeout=0.3), TokenStore([]))

    async def timed() -> tuple[httpx.Response, float]:
        started = time.monotonic()
        [answer] = await _flood(app, 1)
        return answer, time.monotonic() - started

    answer, took = asyncio.run(timed())  # (asyncio.run then waits for the hanging probe's thread)
    assert took < 2.0
    assert answer.json()["ok"] is False
    assert "has not answered" in answer.json()["message"]


@pytest.mark.parametrize("depth", [500, 990, 100_000])
def test_a_deeply_nested_body_is_a_typed_400(client: Any, depth: int) -> None:
    body = '{"workspace_id": "w-1", "agent_id": "a1", "query": "q", "x": ' + "[" * depth + "]" * depth + "}"
    response = _raw(client, "/v1/recall", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "InvalidRequest"
