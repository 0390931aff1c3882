"""Console sessions end: after SESSION_IDLE seconds without a request, and SESSION_LIFETIME after the login.

In process (Starlette's TestClient over create_app) with the console's clock moved forward:
waiting half an hour in a test is not an option.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from httpremote_support import make_test_client_class

import memvault
from memvault.providers.memory import MemoryProvider
from memvault_http_remote import console
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore, hash_token

TestClient = make_test_client_class()
ORIGIN = {"Origin": "http://testserver"}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(console, "time", fake)
    return fake


@pytest.fixture
def client(clock: _Clock) -> Iterator[Any]:
    vault = memvault.Vault(MemoryProvider(), name="memory", capabilities=MemoryProvider.capabilities)
    tokens = TokenStore([TokenEntry(name="ops", sha256=hash_token("ops-token"), workspaces=["acme"])])
    with TestClient(create_app(vault, ServerSettings(), tokens), follow_redirects=False) as test_client:
        assert test_client.post("/console/login", data={"token": "ops-token"}, headers=ORIGIN).status_code == 303
        yield test_client


def _logged_in(client: Any) -> bool:
    response = client.get("/console/workspaces")
    return bool(response.status_code == 200)


def test_a_session_ends_after_its_idle_time(client: Any, clock: _Clock) -> None:
    clock.now += console.SESSION_IDLE - 1
    assert _logged_in(client)
    clock.now += console.SESSION_IDLE + 1
    assert not _logged_in(client)
    assert client.get("/console/workspaces").headers["location"] == "/console/login"


def test_a_used_session_still_ends_at_its_lifetime(client: Any, clock: _Clock) -> None:
    while clock.now + console.SESSION_IDLE / 2 < 1000.0 + console.SESSION_LIFETIME:
        clock.now += console.SESSION_IDLE / 2
        assert _logged_in(client)
    clock.now = 1000.0 + console.SESSION_LIFETIME + 1
    assert not _logged_in(client)


def test_sessions_are_bounded(clock: _Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Logins cannot grow the process without bound: past MAX_SESSIONS the oldest session ends."""
    monkeypatch.setattr(console, "MAX_SESSIONS", 3)
    vault = memvault.Vault(MemoryProvider(), name="memory", capabilities=MemoryProvider.capabilities)
    tokens = TokenStore([TokenEntry(name="ops", sha256=hash_token("ops-token"), workspaces=["acme"])])
    with TestClient(create_app(vault, ServerSettings(), tokens), follow_redirects=False) as app_client:
        cookies = []
        for _ in range(4):
            clock.now += 1
            response = app_client.post("/console/login", data={"token": "ops-token"}, headers=ORIGIN)
            cookies.append(response.cookies["memvault_console"])
            app_client.cookies.clear()
        statuses = [app_client.get("/console/workspaces", cookies={"memvault_console": c}).status_code for c in cookies]
    assert statuses == [303, 200, 200, 200]
