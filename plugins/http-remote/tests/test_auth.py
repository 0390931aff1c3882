"""Bearer tokens bound to workspaces: 401 without a valid token, 403 on another workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from httpremote_support import NARROW_TOKEN, NARROW_WORKSPACE, PARITY_TOKEN, ServerProcess, make_test_client_class
from hypothesis import given
from hypothesis import strategies as st

import memvault
from memvault.contract.errors import InvalidRequest
from memvault.providers.memory import MemoryProvider
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore, hash_token, load_tokens_file

TestClient = make_test_client_class()

TOKENS = {
    "alpha-only": ["alpha"],
    "team-prefix": ["team-*"],
    "everything": ["*"],
    "two-exact": ["alpha", "beta"],
}
WORKSPACES = ["alpha", "alphabet", "beta", "team-", "team-red", "team", "teamx", "gamma"]
VERB_BODIES = {
    "/v1/recall": {"agent_id": "a1", "query": "note"},
    "/v1/read": {"agent_id": "a1", "tier": "AGENT"},
    "/v1/retain": {"agent_id": "a1", "tier": "AGENT", "content": "x\n", "mode": "append"},
    "/v1/forget": {"agent_id": "a1", "id": "AGENT.md"},
    "/v1/quarantine/list": {},
    "/v1/documents/list": {},
}


def _store() -> TokenStore:
    return TokenStore(
        TokenEntry(name=secret, sha256=hash_token(secret), workspaces=patterns) for secret, patterns in TOKENS.items()
    )


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """An in-process service over the memory provider; each workspace holds one line naming itself."""
    vault = memvault.Vault(MemoryProvider(), name="memory", capabilities=MemoryProvider.capabilities)
    with TestClient(create_app(vault, ServerSettings(), _store())) as test_client:
        for ws in WORKSPACES:
            response = test_client.post(
                "/v1/retain",
                json={
                    "workspace_id": ws,
                    "agent_id": "a1",
                    "tier": "AGENT",
                    "content": f"note of {ws}\n",
                    "mode": "replace",
                },
                headers={"Authorization": "Bearer everything"},
            )
            assert response.status_code == 200, response.text
        yield test_client
    vault.close()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("path", sorted(VERB_BODIES))
def test_verb_without_a_token_is_401_unauthorized(client: TestClient, path: str) -> None:
    response = client.post(path, json={"workspace_id": "alpha", **VERB_BODIES[path]})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "Unauthorized"
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer nope", "Basic YWxwaGEtb25seQ==", "Bearer", "alpha-only"])
def test_unknown_token_or_scheme_is_401(client: TestClient, header: str) -> None:
    response = client.post(
        "/v1/recall", json={"workspace_id": "alpha", **VERB_BODIES["/v1/recall"]}, headers={"Authorization": header}
    )
    assert response.status_code == 401


@pytest.mark.parametrize("path", sorted(VERB_BODIES))
def test_token_on_another_workspace_is_403(client: TestClient, path: str) -> None:
    response = client.post(path, json={"workspace_id": "beta", **VERB_BODIES[path]}, headers=_bearer("alpha-only"))
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "Unauthorized"


def test_403_never_says_whether_the_workspace_exists(client: TestClient) -> None:
    """'beta' holds data, 'never-written' does not: the refusals are byte-identical."""
    answers = [
        client.post(
            "/v1/read", json={"workspace_id": ws, "agent_id": "a1", "tier": "AGENT"}, headers=_bearer("alpha-only")
        )
        for ws in ("beta", "never-written")
    ]
    assert [a.status_code for a in answers] == [403, 403]
    assert answers[0].content == answers[1].content
    assert "beta" not in answers[0].text


def test_health_needs_no_token_and_names_no_workspace(client: TestClient) -> None:
    response = client.get("/v1/health")
    assert response.status_code == 200
    assert set(response.json()) == {"ok", "message", "checked_at"}
    assert not any(ws in response.text for ws in WORKSPACES)


def test_health_with_a_rejected_token_is_401(client: TestClient) -> None:
    """P27: a presented but unknown credential is reported, so clients can tell it expired."""
    assert client.get("/v1/health", headers=_bearer("expired")).status_code == 401


@given(
    token=st.sampled_from(sorted(TOKENS)),
    ws=st.sampled_from(WORKSPACES),
    path=st.sampled_from(["/v1/read", "/v1/recall"]),
)
def test_no_token_ever_reaches_a_workspace_it_is_not_bound_to(
    client: TestClient, token: str, ws: str, path: str
) -> None:
    """P3 over the wire: 403 exactly when the binding excludes the workspace; else only that workspace's data."""
    body = {"workspace_id": ws, **VERB_BODIES[path]}
    response = client.post(path, json=body, headers=_bearer(token))
    allowed = any(p == ws or (p.endswith("*") and ws.startswith(p[:-1])) for p in TOKENS[token])
    if not allowed:
        assert response.status_code == 403
        return
    assert response.status_code == 200, response.text
    texts = [response.json()["content"]] if path == "/v1/read" else [h["snippet"] for h in response.json()["hits"]]
    assert texts == [f"note of {ws}"] or texts == [f"note of {ws}\n"]


def _listed(response: object) -> set[str]:
    return {d["workspace_id"] for d in response.json()["documents"]}  # type: ignore[attr-defined]


@pytest.mark.parametrize("token", ["alpha-only", "team-prefix", "two-exact"])
def test_listing_every_workspace_needs_a_token_for_all_of_them(client: TestClient, token: str) -> None:
    """An empty workspace_id lists every workspace: a token bound to some of them gets 403, and no names."""
    response = client.post("/v1/documents/list", json={}, headers=_bearer(token))
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "Unauthorized"
    assert not any(ws in response.text for ws in WORKSPACES)
    explicit = client.post("/v1/documents/list", json={"workspace_id": ""}, headers=_bearer(token))
    assert explicit.status_code == 403


def test_a_token_for_every_workspace_lists_them_all(client: TestClient) -> None:
    response = client.post("/v1/documents/list", json={}, headers=_bearer("everything"))
    assert response.status_code == 200, response.text
    assert _listed(response) == set(WORKSPACES)


@pytest.mark.parametrize(("token", "ws"), [("alpha-only", "alpha"), ("team-prefix", "team-red"), ("two-exact", "beta")])
def test_listing_a_workspace_returns_only_that_workspace(client: TestClient, token: str, ws: str) -> None:
    response = client.post("/v1/documents/list", json={"workspace_id": ws}, headers=_bearer(token))
    assert response.status_code == 200, response.text
    assert _listed(response) == {ws}
    assert [d["label"] for d in response.json()["documents"]] == ["AGENT.md"]


@given(ws=st.from_regex(r"[A-Za-z0-9_:@-][A-Za-z0-9._:@-]{0,20}", fullmatch=True))
def test_prefix_token_allows_exactly_the_workspaces_with_its_prefix(ws: str) -> None:
    entry = TokenEntry(sha256=hash_token("t"), workspaces=["team-*"])
    assert entry.allows(ws) is ws.startswith("team-")


def test_tokens_are_found_by_their_hash_only() -> None:
    store = _store()
    assert store.lookup("team-prefix") is not None
    assert store.lookup(hash_token("team-prefix")) is None  # the stored hash is not itself a token


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"sha256": "not-hex", "workspaces": ["a"]}, "sha256"),
        ({"sha256": "a" * 64, "workspaces": []}, "workspaces"),
        ({"sha256": "a" * 64, "workspaces": ["../x"]}, "workspaces"),
        ({"sha256": "a" * 64, "workspaces": ["a*b"]}, "workspaces"),
    ],
)
def test_malformed_token_entries_are_rejected_naming_the_field(entry: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        ServerSettings.from_table({"tokens": [entry]})
    assert info.value.field == field


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1.0])
def test_a_server_timeout_must_be_positive_and_finite(value: float) -> None:
    """TOML allows nan and inf; nan passed the old `<= 0` check, and neither is a timeout."""
    with pytest.raises(InvalidRequest, match="request_timeout must be a positive, finite number") as info:
        ServerSettings.from_table({"request_timeout": value})
    assert info.value.field == "request_timeout"


def test_unknown_server_key_is_rejected_with_the_key_named() -> None:
    with pytest.raises(InvalidRequest, match="prot") as info:
        ServerSettings.from_table({"prot": 8765})
    assert info.value.field == "prot"


# -- through the real client and server ---------------------------------------------


def test_client_without_a_token_raises_unauthorized(served: ServerProcess) -> None:
    with memvault.open("http-remote", url=served.url) as vault, pytest.raises(memvault.Unauthorized):
        vault.read(memvault.ReadRequest(workspace_id="parity-x", agent_id="a1", tier="AGENT"))


def test_client_on_another_workspace_raises_unauthorized(served: ServerProcess) -> None:
    with memvault.open("http-remote", url=served.url, token=NARROW_TOKEN) as vault:
        assert (
            vault.read(memvault.ReadRequest(workspace_id=NARROW_WORKSPACE, agent_id="a1", tier="AGENT")).content == ""
        )
        with pytest.raises(memvault.Unauthorized):
            vault.read(memvault.ReadRequest(workspace_id="parity-x", agent_id="a1", tier="AGENT"))


def test_client_health_reports_a_rejected_token(served: ServerProcess) -> None:
    """P27: an expired credential gives ok=False with its own message; a good one is ok."""
    with memvault.open("http-remote", url=served.url, token="expired-token") as vault:
        status = vault.health()
    assert (status.ok, "token" in status.message) == (False, True)
    with memvault.open("http-remote", url=served.url, token=PARITY_TOKEN) as vault:
        assert vault.health().ok


def test_tokens_file_problems_are_invalid_request_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "tokens.toml"
    with pytest.raises(memvault.InvalidRequest, match="does not exist: create it with `memvault token new"):
        load_tokens_file(missing)
    missing.write_text("[[tokens]\n")
    with pytest.raises(memvault.InvalidRequest, match="is not valid TOML"):
        load_tokens_file(missing)
