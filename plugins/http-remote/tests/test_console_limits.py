"""A logged-in operator's console requests count against their token's bound, not the anonymous one.

The request gate gives every caller without a bearer token one small shared bound
(``max_unauthenticated``), so that callers without a token cannot starve token holders.
Console pages authenticate by a session cookie instead of a bearer header: counted as
anonymous, they would be the ones starved by anyone holding that shared bound.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from httpremote_support import SlowProvider

import memvault
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore, hash_token

TOKEN = "console-limits-token"
BASE = "http://service"


def _stalled_upload_scope() -> dict[str, Any]:
    """A console login whose form never arrives: it holds an anonymous slot (no token before the body)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/console/login",
        "raw_path": b"/console/login",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"transfer-encoding", b"chunked"),
            (b"origin", BASE.encode()),
            (b"host", b"service"),
        ],
        "client": ("127.0.0.1", 2),
        "server": ("127.0.0.1", 8765),
    }


def test_anonymous_callers_holding_their_bound_do_not_lock_a_logged_in_operator_out() -> None:
    vault = memvault.Vault(SlowProvider(delay=0.0), name="slow")
    tokens = TokenStore([TokenEntry(name="ops", sha256=hash_token(TOKEN), workspaces=["*"])])
    app = create_app(vault, ServerSettings(max_unauthenticated=1, body_timeout=10.0), tokens)

    async def scenario() -> tuple[int, int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers={"Origin": BASE}) as operator:
            login = await operator.post("/console/login", data={"token": TOKEN})
            assert login.status_code == 303, login.text

            never = asyncio.Event()
            sent: list[Any] = []

            async def receive() -> dict[str, Any]:
                await never.wait()
                return {"type": "http.disconnect"}

            async def send(message: Any) -> None:
                sent.append(message)

            stalled = asyncio.create_task(app(_stalled_upload_scope(), receive, send))
            await asyncio.sleep(0.3)
            try:
                async with httpx.AsyncClient(transport=transport, base_url=BASE) as stranger:
                    anonymous = (await stranger.get("/console/login")).status_code
                page = await operator.get("/console/workspaces")
                return anonymous, page.status_code, len(sent)
            finally:
                never.set()
                stalled.cancel()
                await asyncio.gather(stalled, return_exceptions=True)

    anonymous, operator_page, answered = asyncio.run(scenario())
    assert answered == 0  # the stalled upload still held its slot while the others asked
    assert anonymous == 503  # the shared anonymous bound is full ...
    assert operator_page == 200  # ... and the operator's session is counted as its token, not anonymous
