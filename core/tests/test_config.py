"""memvault.toml loading and the one cattrs converter (D3, house rules for config)."""

from __future__ import annotations

from pathlib import Path

import pytest

import memvault
from memvault.config import Config, load_config
from memvault.contract.errors import InvalidRequest, ProviderNotFound
from memvault.contract.wire import structure, unstructure


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config() == Config()
    assert Config().provider == "sqlite"


def test_file_names_provider_and_settings(tmp_path: Path) -> None:
    path = tmp_path / "memvault.toml"
    path.write_text('provider = "memory"\nscanner = "off"\n[providers.sqlite]\npath = "m.db"\n')
    config = load_config(path)
    assert (config.provider, config.scanner, config.providers) == ("memory", "off", {"sqlite": {"path": "m.db"}})


def test_local_memvault_toml_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "memvault.toml").write_text('provider = "memory"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config().provider == "memory"


def test_env_overrides_file_and_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "other.toml"
    path.write_text('provider = "sqlite"\n')
    monkeypatch.setenv("MEMVAULT_CONFIG", str(path))
    monkeypatch.setenv("MEMVAULT_PROVIDER", "memory")
    config = load_config()
    assert (config.provider, config.source) == ("memory", str(path))


def test_unknown_key_is_rejected_with_the_key_named(tmp_path: Path) -> None:
    path = tmp_path / "memvault.toml"
    path.write_text('provider = "memory"\nprovder = "typo"\n')
    with pytest.raises(InvalidRequest, match="unknown key\\(s\\) provder"):
        load_config(path)


def test_wrong_type_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "memvault.toml"
    path.write_text("provider = 3\n")
    with pytest.raises(InvalidRequest, match="provider"):
        load_config(path)


def test_bad_toml_and_missing_file_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("provider = \n")
    with pytest.raises(InvalidRequest, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(InvalidRequest, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_d3_open_from_config_opens_the_named_provider(tmp_path: Path) -> None:
    path = tmp_path / "memvault.toml"
    path.write_text('provider = "memory"\n')
    with memvault.open_from_config(str(path)) as vault:
        assert vault.name == "memory"


def test_d3_unknown_provider_in_config_lists_installed(tmp_path: Path) -> None:
    path = tmp_path / "memvault.toml"
    path.write_text('provider = "couchdb"\n')
    with pytest.raises(ProviderNotFound, match="installed providers: .*memory"):
        memvault.open_from_config(str(path))


def test_wire_round_trips_every_result_type() -> None:
    values = [
        memvault.RetainResult(id="AGENT.md", bytes=3, warning=""),
        memvault.RecallResult(
            hits=[memvault.RecallSnippet(source="pins.md", line=2, snippet="x", score=0.75)], quarantined=["AGENT.md"]
        ),
        memvault.ReadResult(
            id="AGENT.md", content="[BLOCKED]", quarantine=memvault.Quarantine(category="c", pattern="p", sha256="s")
        ),
        memvault.ForgetResult(removed=2),
        memvault.HealthStatus(ok=False, message="down"),
    ]
    for value in values:
        assert structure(unstructure(value), type(value)) == value


def test_wire_request_validation_errors_keep_their_field() -> None:
    data = {"workspace_id": "w", "agent_id": "a/b", "tier": "AGENT", "content": "c", "mode": "append"}
    with pytest.raises(InvalidRequest) as info:
        structure(data, memvault.RetainRequest)
    assert info.value.field == "agent_id"


def test_wire_rejects_unknown_keys() -> None:
    with pytest.raises(InvalidRequest, match="unknown key\\(s\\) colour"):
        structure({"removed": 1, "colour": "red"}, memvault.ForgetResult)


@pytest.mark.parametrize("data", [[], "text", 3, None])
def test_wire_non_object_payload_is_invalid_request(data: object) -> None:
    with pytest.raises(InvalidRequest):
        structure(data, memvault.RecallRequest)


@pytest.mark.parametrize(
    "raw",
    [b"[server]\nport = " + b"9" * 5000 + b"\n", b'provider = "\xff\xfe"\n'],
    ids=["integer-over-4300-digits", "not-utf-8"],
)
def test_a_config_python_cannot_convert_is_invalid_request_naming_the_file(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "memvault.toml"
    path.write_bytes(raw)
    with pytest.raises(InvalidRequest, match="memvault.toml"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-31T10:00:00Z", "2026-01-31T10:00:00+00:00"),
        ("2026-01-31t10:00:00z", "2026-01-31T10:00:00+00:00"),
        ("1207-01-12T20:47:06.12-02:56", "1207-01-12T20:47:06.120000-02:56"),
        ("2026-01-31T10:00:00.1234567+01:00", "2026-01-31T10:00:00.123456+01:00"),
        ("2026-01-31T10:00:00.5+00:00", "2026-01-31T10:00:00.500000+00:00"),
    ],
)
def test_wire_reads_every_rfc_3339_timestamp_on_every_python(text: str, expected: str) -> None:
    """Python 3.10's fromisoformat takes only 3 or 6 fraction digits and no 'Z': the wire must not."""
    import datetime as dt

    from memvault.contract.wire import converter

    assert converter.structure(text, dt.datetime).isoformat() == expected
