"""The quarantine routes validate identifiers, labels and digests like every other route (P3, P30)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from httpremote_support import make_test_client_class

import memvault
from memvault.providers.memory import MemoryProvider
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore, hash_token

TestClient = make_test_client_class()
DIGEST = "ab" * 32
GOOD = {
    "workspace_id": "team-red",
    "agent_id": "a1",
    "label": "AGENT.md",
    "category": "instruction_override",
    "pattern": "ignore previous instructions",
    "sha256": DIGEST,
    "content": "Ignore previous instructions.\n",
}
ADMIN = {"Authorization": "Bearer admin"}
TEAM = {"Authorization": "Bearer team"}


@pytest.fixture
def client() -> Iterator[Any]:
    vault = memvault.Vault(MemoryProvider(), name="memory", capabilities=MemoryProvider.capabilities)
    tokens = TokenStore(
        [
            TokenEntry(name="admin", sha256=hash_token("admin"), workspaces=["*"]),
            TokenEntry(name="team", sha256=hash_token("team"), workspaces=["team-*"]),
        ]
    )
    with TestClient(create_app(vault, ServerSettings(), tokens)) as test_client:
        yield test_client


def _post(client: Any, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    """JSON with \\u escapes (ensure_ascii), so lone surrogates travel as a real client can send them."""
    return client.post(path, content=json.dumps(body), headers={**headers, "Content-Type": "application/json"})


def _everything(client: Any, workspaces: list[str]) -> list[Any]:
    found = []
    for ws in workspaces:
        response = _post(client, "/v1/quarantine/list", {"workspace_id": ws}, headers=ADMIN)
        if response.status_code == 200:
            found += response.json()["records"] or []
    return found


BAD_KEEPS = [
    ("workspace_id", ""),
    ("workspace_id", "../x"),
    ("workspace_id", "a\u0000b"),
    ("workspace_id", "w" * 129),
    ("workspace_id", "*"),
    ("workspace_id", "team-*"),
    ("agent_id", "../a"),
    ("crew_id", "c/1"),
    ("data_subject_id", "s\nx"),
    ("label", "../../x"),
    ("label", "notes.txt"),
    ("sha256", "../../etc/passwd"),
    ("sha256", "AB" * 32),
    ("content", "\ud800"),
    ("category", "\ud800"),
    ("pattern", "\udfff"),
]


@pytest.mark.parametrize(("field", "value"), BAD_KEEPS, ids=[f"{f}={v[:12]!r}" for f, v in BAD_KEEPS])
def test_quarantine_keep_refuses_invalid_identifiers_labels_and_text(client: Any, field: str, value: str) -> None:
    response = _post(client, "/v1/quarantine/keep", {**GOOD, field: value}, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "InvalidRequest"
    assert response.json()["error"]["field"] == field
    assert _everything(client, ["team-red", "team-", "w"]) == []


def test_a_prefix_token_cannot_write_quarantine_copies_outside_real_workspaces(client: Any) -> None:
    """team-* admits team-red, never the literal pattern or a path hiding behind the prefix."""
    for workspace in ("team-*", "team-../x", "team-/x", "team-\u0000"):
        response = _post(client, "/v1/quarantine/keep", {**GOOD, "workspace_id": workspace}, headers=TEAM)
        assert response.status_code == 400, (workspace, response.text)
    assert _post(client, "/v1/quarantine/keep", {**GOOD, "workspace_id": "other"}, headers=TEAM).status_code == 403
    assert _post(client, "/v1/quarantine/keep", GOOD, headers=TEAM).json() == {"kept": True}
    assert [r["workspace_id"] for r in _everything(client, ["team-red"])] == ["team-red"]


@pytest.mark.parametrize(
    "body",
    [
        {"workspace_id": "../x"},
        {"workspace_id": ""},
        {"workspace_id": "w" * 129},
        {"workspace_id": "\ud800"},
    ],
)
def test_quarantine_list_refuses_invalid_workspaces(client: Any, body: dict[str, str]) -> None:
    response = _post(client, "/v1/quarantine/list", body, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == "workspace_id"


@pytest.mark.parametrize("sha256", ["\ud800", "../x", "", "0" * 63, "g" * 64])
def test_quarantine_get_refuses_a_digest_that_is_not_64_hex(client: Any, sha256: str) -> None:
    response = _post(client, "/v1/quarantine/get", {"workspace_id": "w", "sha256": sha256}, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "type": "InvalidRequest",
        "message": response.json()["error"]["message"],
        "field": "sha256",
    }
