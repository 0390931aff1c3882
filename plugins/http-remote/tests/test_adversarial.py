"""The service as an attacker meets it: a real `memvault serve` on 127.0.0.1, hostile clients.

Every scenario is bounded in time (the slowest, the stalled uploads, takes about
``body_timeout`` seconds) so the module runs in CI on two shared cores.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpremote_support import ServerProcess, memvault_command, raw_http, valid_bodies

from memvault.contract.models import MAX_QUERY_BYTES, MAX_QUERY_TERMS
from memvault_http_remote.settings import hash_token

TOKENS = {
    "admin-token-000000": ["*"],
    "tenant-a-token-0000": ["tenant-a"],
    "tenant-b-token-0000": ["tenant-b"],
    "team-token-00000000": ["team-*"],
}
A, B, ADMIN, TEAM = "tenant-a-token-0000", "tenant-b-token-0000", "admin-token-000000", "team-token-00000000"
BODY_TIMEOUT = 3.0
POST_ROUTES = sorted(valid_bodies("x"))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("adversarial")
    entries = "".join(
        f'[[server.tokens]]\nname = "{token[:8]}"\nsha256 = "{hash_token(token)}"\nworkspaces = {json.dumps(ws)}\n'
        for token, ws in TOKENS.items()
    )
    (root / "memvault.toml").write_text(
        f'provider = "sqlite"\n[providers.sqlite]\npath = "{root / "adv.db"}"\n'
        f"[server]\nport = 0\nbody_timeout = {BODY_TIMEOUT}\n{entries}",
        encoding="utf-8",
    )
    proc = ServerProcess(memvault_command("--config", str(root / "memvault.toml"), "serve"), root)
    with httpx.Client(base_url=proc.url, timeout=10) as http:
        for ws, token in (("tenant-a", A), ("tenant-b", B)):
            body = {
                "workspace_id": ws,
                "agent_id": "a1",
                "tier": "AGENT",
                "content": f"tea of {ws}\n",
                "mode": "append",
            }
            assert http.post("/v1/retain", json=body, headers=_bearer(token)).status_code == 200
    yield proc
    proc.stop()


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


def _typed(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == kind, error
    return error


def _send(http: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, Any]) -> httpx.Response:
    """JSON with \\u escapes, as any client may send it (lone surrogates included)."""
    return http.post(path, content=json.dumps(body), headers={**headers, "Content-Type": "application/json"})


# -- the authorization matrix ---------------------------------------------------------

MALFORMED_AUTH = [
    "Bearer",
    "bearer",
    "Basic dGVuYW50LWE6cGFzcw==",
    f"Token {A}",
    f"Bearer{A}",
    f"Bearer {A} extra",
    f"Bearer {A[:-1]}",
    "Bearer \u00e9t\u00e9",
    "Bearer " + "x" * 8000,
]


@pytest.mark.parametrize("path", POST_ROUTES)
def test_every_route_answers_the_right_token_on_its_workspace(http: httpx.Client, path: str) -> None:
    response = _send(http, path, valid_bodies("tenant-a")[path], _bearer(A))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", POST_ROUTES)
def test_every_route_refuses_a_token_on_another_workspace_without_touching_it(http: httpx.Client, path: str) -> None:
    answers = [_send(http, path, valid_bodies(ws)[path], _bearer(A)) for ws in ("tenant-b", "never-written")]
    for response in answers:
        _typed(response, 403, "Unauthorized")
    assert answers[0].content == answers[1].content  # existence is never revealed
    assert (
        "tea of tenant-b" in http.post("/v1/read", json=valid_bodies("tenant-b")["/v1/read"], headers=_bearer(B)).text
    )


@pytest.mark.parametrize("path", [*POST_ROUTES, "/v1/capabilities"])
def test_every_route_refuses_a_request_without_a_token(http: httpx.Client, path: str) -> None:
    response = http.get(path) if path == "/v1/capabilities" else _send(http, path, valid_bodies("tenant-a")[path], {})
    _typed(response, 401, "Unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", MALFORMED_AUTH, ids=range(len(MALFORMED_AUTH)))
@pytest.mark.parametrize("path", [*POST_ROUTES, "/v1/capabilities", "/v1/health"])
def test_every_route_refuses_a_malformed_authorization_header(http: httpx.Client, path: str, header: str) -> None:
    headers: dict[str, Any] = {"Authorization": header.encode("utf-8")}  # raw bytes, UTF-8 included
    if path.startswith("/v1/quarantine") or path not in ("/v1/capabilities", "/v1/health"):
        response = _send(http, path, valid_bodies("tenant-a")[path], headers)
    else:
        response = http.get(path, headers=headers)
    _typed(response, 401, "Unauthorized")


def test_health_needs_no_token(http: httpx.Client) -> None:
    assert http.get("/v1/health").json()["ok"] is True


def test_a_prefix_token_reaches_its_prefix_only_and_never_the_pattern_itself(http: httpx.Client) -> None:
    for path in POST_ROUTES:
        assert _send(http, path, valid_bodies("team-red")[path], _bearer(TEAM)).status_code == 200
        _typed(_send(http, path, valid_bodies("teamred")[path], _bearer(TEAM)), 403, "Unauthorized")
        for sneaky in ("team-*", "team-../x", "team-/x"):
            _typed(_send(http, path, valid_bodies(sneaky)[path], _bearer(TEAM)), 400, "InvalidRequest")


# -- stalled uploads ------------------------------------------------------------------


def _stalled(url: str, token: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT + 10)
    sock.sendall(
        b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: 1000\r\n\r\n{{".encode()
    )
    return sock


def _status_of(sock: socket.socket) -> int:
    try:
        data = sock.recv(4096)
    except OSError:
        return 0
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def test_one_token_stalling_64_uploads_cannot_stall_another_tenant_or_health(server: ServerProcess) -> None:
    """64 connections send headers and '{' of a 1000-byte body, then nothing. Meanwhile another
    tenant's recall and the health check each answer within 1 s; the stalled requests end with 408
    after body_timeout, and those past the token's bound were refused at once with 503."""
    attackers = [_stalled(server.url, A) for _ in range(64)]
    try:
        time.sleep(0.5)  # every stalled request has reached the service
        with httpx.Client(base_url=server.url, timeout=5) as other:
            for _ in range(3):
                started = time.monotonic()
                recall = other.post("/v1/recall", json=valid_bodies("tenant-b")["/v1/recall"], headers=_bearer(B))
                recall_took = time.monotonic() - started
                started = time.monotonic()
                health = other.get("/v1/health")
                health_took = time.monotonic() - started
                assert recall.status_code == 200, recall.text
                assert "tea of tenant-b" in recall.text
                assert recall_took < 1.0
                assert (health.status_code, health.json()["ok"]) == (200, True)
                assert health_took < 1.0
        statuses = [_status_of(sock) for sock in attackers]
    finally:
        for sock in attackers:
            sock.close()
    assert statuses.count(503) >= 64 - 16
    assert set(statuses) <= {503, 408}
    assert statuses.count(408) >= 1


def test_a_stalled_upload_ends_with_a_typed_408_after_the_body_timeout(server: ServerProcess) -> None:
    took_at_first_byte: list[float] = []
    sock = _stalled(server.url, B)
    started = time.monotonic()
    data = b""
    try:
        while chunk := sock.recv(65536):  # the service closes the connection after its 408
            data += chunk
            if not took_at_first_byte:
                took_at_first_byte.append(time.monotonic() - started)
    finally:
        sock.close()
    took = took_at_first_byte[0]
    assert BODY_TIMEOUT - 0.5 < took < BODY_TIMEOUT + 3
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["type"] == "InvalidRequest"


def _connect(url: str, head: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT + 10)
    sock.sendall(head)
    return sock


def _answer_and_time(sock: socket.socket, started: float) -> tuple[bytes, float]:
    """Everything the service sends until it closes the connection, and when it closed it."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    finally:
        sock.close()
    return data, time.monotonic() - started


@pytest.mark.parametrize(
    "head",
    [b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nAuthorization: Bear", b"GET /v1/hea", b""],
    ids=["partial-headers", "partial-request-line", "nothing"],
)
def test_a_connection_whose_request_head_stalls_is_closed_after_the_body_timeout(
    server: ServerProcess, head: bytes
) -> None:
    # Before: uvicorn kept such a connection open for ever, so one caller without a token
    # could hold every file descriptor of the service.
    started = time.monotonic()
    data, took = _answer_and_time(_connect(server.url, head), started)
    assert BODY_TIMEOUT - 0.5 < took < BODY_TIMEOUT + 3
    if head:
        status_line, _, body = data.partition(b"\r\n\r\n")
        assert status_line.startswith(b"HTTP/1.1 408")
        error = json.loads(body)["error"]
        assert (error["type"], error["field"]) == ("InvalidRequest", "headers")
        assert "server.body_timeout" in error["message"]
    else:
        assert data == b""  # nothing was asked: the connection is closed without an answer


def test_200_stalled_request_heads_cannot_stall_another_tenant_or_health(server: ServerProcess) -> None:
    attackers = [_connect(server.url, b"POST /v1/recall HTTP/1.1\r\nHost: x\r\n") for _ in range(200)]
    try:
        with httpx.Client(base_url=server.url, timeout=5) as other:
            for _ in range(3):
                started = time.monotonic()
                recall = other.post("/v1/recall", json=valid_bodies("tenant-b")["/v1/recall"], headers=_bearer(B))
                assert recall.status_code == 200, recall.text
                assert time.monotonic() - started < 1.0
                assert other.get("/v1/health").json()["ok"] is True
        started = time.monotonic()
        closed = [_answer_and_time(sock, started) for sock in attackers]
    finally:
        for sock in attackers:
            sock.close()
    assert all(data.startswith(b"HTTP/1.1 408") for data, _ in closed)
    assert max(took for _, took in closed) < BODY_TIMEOUT + 3


def test_a_slow_but_timely_request_head_is_answered(server: ServerProcess) -> None:
    body = json.dumps(valid_bodies("tenant-b")["/v1/recall"]).encode()
    head = (
        b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {B}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    )
    sock = _connect(server.url, b"")
    for start in range(0, len(head), 16):  # the head in pieces over about a third of the timeout
        sock.sendall(head[start : start + 16])
        time.sleep(BODY_TIMEOUT / 3 / (len(head) / 16))
    sock.sendall(body)
    data, _ = _answer_and_time(sock, time.monotonic())
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert b"tea of tenant-b" in data


def test_a_client_leaving_mid_body_is_one_log_line_not_a_traceback(server: ServerProcess) -> None:
    before = len(server.stderr_lines)
    for _ in range(3):
        sock = _stalled(server.url, B)  # headers and '{' of a 1000-byte body
        time.sleep(0.2)
        sock.close()  # and gone
    time.sleep(0.5)
    logged = "\n".join(server.stderr_lines[before:])
    assert "Traceback" not in logged
    assert "unexpected error" not in logged
    assert logged.count("POST /v1/recall 400") == 3, logged


# -- malformed bodies and headers -----------------------------------------------------


@pytest.mark.parametrize("path", POST_ROUTES)
def test_integers_over_4300_digits_are_a_typed_400_on_every_json_route(http: httpx.Client, path: str) -> None:
    body = json.dumps(valid_bodies("tenant-a")[path])
    for attack in (body[:-1] + ', "limit": ' + "9" * 4301 + "}", '{"n": -' + "1" * 20000 + ", " + body[1:]):
        response = http.post(path, content=attack, headers={**_bearer(A), "Content-Type": "application/json"})
        assert _typed(response, 400, "InvalidRequest")["field"] == "body"


@pytest.mark.parametrize("path", POST_ROUTES)
def test_lone_surrogates_are_a_typed_400_in_every_string_field(http: httpx.Client, path: str) -> None:
    body = valid_bodies("tenant-a")[path]
    for name in [k for k, v in body.items() if isinstance(v, str)]:
        for surrogate in ("\ud800", "\udfff"):
            response = _send(http, path, {**body, name: "x" + surrogate}, _bearer(ADMIN))
            assert _typed(response, 400, "InvalidRequest")["field"] == name, (path, name)


@pytest.mark.parametrize(
    ("length", "status"),
    [("-1", 400), ("abc", 400), ("1e3", 400), ("9" * 30, 400), ("9" * 6000, 400), ("2000000", 413)],
)
def test_a_bad_content_length_gets_the_typed_error_body(server: ServerProcess, length: str, status: int) -> None:
    request = (
        f"POST /v1/recall HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {A}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n{{}}"
    ).encode()
    got, headers, body = raw_http(server.url, request)
    assert got == status
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["type"] == "InvalidRequest"


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/v2/recall", 404), ("DELETE", "/v1/read", 405)])
def test_unknown_paths_and_methods_get_the_typed_error_body(
    http: httpx.Client, method: str, path: str, status: int
) -> None:
    _typed(http.request(method, path, headers=_bearer(A)), status, "InvalidRequest")


# -- oversized queries ----------------------------------------------------------------


def _recall(query: str) -> dict[str, Any]:
    return {**valid_bodies("tenant-a")["/v1/recall"], "query": query}


@pytest.mark.parametrize(
    ("query", "limit"),
    [
        ("x" * (MAX_QUERY_BYTES + 1), f"{MAX_QUERY_BYTES} UTF-8 bytes"),
        ("\u00e9" * (MAX_QUERY_BYTES // 2 + 1), f"{MAX_QUERY_BYTES} UTF-8 bytes"),
        (" ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 1)), f"{MAX_QUERY_TERMS} distinct search terms"),
    ],
    ids=["ascii", "two-byte", "terms"],
)
def test_an_oversized_query_is_invalid_request_naming_the_field_and_the_limit(
    http: httpx.Client, query: str, limit: str
) -> None:
    error = _typed(http.post("/v1/recall", json=_recall(query), headers=_bearer(A)), 400, "InvalidRequest")
    assert error["field"] == "query"
    assert limit in error["message"]


def test_eight_concurrent_850_kb_queries_are_refused_quickly_and_health_holds(server: ServerProcess) -> None:
    query = " ".join(f"t{i}" for i in range(120_000))[:850_000]

    def one(_: int) -> tuple[int, float]:
        started = time.monotonic()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            response = client.post("/v1/recall", json=_recall(query), headers=_bearer(A))
        return response.status_code, time.monotonic() - started

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(one, range(8)))
    assert [status for status, _ in outcomes] == [400] * 8
    assert max(took for _, took in outcomes) < 5.0
    with httpx.Client(base_url=server.url, timeout=5) as client:
        assert client.get("/v1/health").json()["ok"] is True


# -- a health flood during writes -----------------------------------------------------


def _writes_per_second(url: str, seconds: float, stop: threading.Event | None = None) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=10) as client:
        while time.monotonic() < deadline:
            body = {
                "workspace_id": "tenant-b",
                "agent_id": "writer",
                "tier": "daily",
                "key": "2026-01-01",
                "content": f"note {done}\n",
                "mode": "replace",
            }
            assert client.post("/v1/retain", json=body, headers=_bearer(B)).status_code == 200
            done += 1
    return done / seconds


_FLOOD = """
import sys, threading, time, httpx
url, seconds = sys.argv[1], float(sys.argv[2])
answers = []
def flood():
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=10) as client:
        while time.monotonic() < deadline:
            started = time.monotonic()
            r = client.get("/v1/health")
            took = time.monotonic() - started
            answers.append((r.status_code, r.json().get("ok") is True, took))
threads = [threading.Thread(target=flood) for _ in range(16)]
[t.start() for t in threads]
ready_by = time.monotonic() + 10
while len(answers) < 16 and time.monotonic() < ready_by:
    time.sleep(0.01)
print("ready", flush=True)
[t.join() for t in threads]
print(len(answers), sum(1 for a in answers if a[:2] != (200, True)), max(a[2] for a in answers))
"""


def _flood_round(url: str) -> tuple[float, float, float, int, int, float]:
    """Writes/s before, during and after a 3 s flood; health answers, not-ok answers, slowest (s)."""
    import subprocess
    import sys

    before = _writes_per_second(url, 1.5)
    flood = subprocess.Popen([sys.executable, "-c", _FLOOD, url, "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout is not None
        assert flood.stdout.readline().strip() == "ready"  # the flood is on
        under_flood = _writes_per_second(url, 2.0)
        out, _ = flood.communicate(timeout=30)
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()
    after = _writes_per_second(url, 1.5)
    count, not_ok, slowest = out.split()
    return before, under_flood, after, int(count), int(not_ok), float(slowest)


def test_a_health_flood_keeps_health_ok_and_writes_flowing(server: ServerProcess) -> None:
    """16 threads (in a process of their own) of unauthenticated health checks while a tenant
    writes: every health answer is ok and prompt, and the writer keeps a fair share of its
    throughput. Throughput on a shared CI machine is noisy: a second round may confirm it."""
    rounds = []
    for _ in range(2):
        before, under_flood, after, answered, bad, slowest = _flood_round(server.url)
        rounds.append((before, under_flood, after))
        print(f"writes/s before {before:.0f}, under a 16-thread health flood {under_flood:.0f}, after {after:.0f};")
        print(f"{answered} health answers, slowest {slowest * 1000:.0f} ms")
        assert answered >= 32  # every flooding thread was answered, repeatedly
        assert bad == 0
        assert slowest < 1.0  # within the http-remote client's health deadline
        if under_flood >= 0.25 * (before + after) / 2:  # before and after: the machine's load drifts
            return
    pytest.fail(f"writes fell below a quarter of their rate under the health flood: {rounds}")
