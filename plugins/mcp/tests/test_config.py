"""The MCP configuration file and the `memvault mcp` command's checks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_support import child_env, memvault_command

from memvault import InvalidRequest
from memvault_mcp import load_server_config, parse_server_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DOCS = Path(__file__).resolve().parents[3] / "docs" / "agent-builders" / "mcp.md"


def test_no_slots_means_one_memory_slot_per_principal() -> None:
    config = parse_server_config({})
    assert [(s.name, s.kind, s.scope) for s in config.slots] == [("memory", "memory", "principal")]
    assert config.principal == "local"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"slotz": []}, "unknown key(s) slotz"),
        ({"slots": [{"name": "a", "scop": "principal"}]}, "unknown key(s) scop"),
        ({"slots": [{"description": "no name"}]}, "'name' is required"),
        ({"slots": [{"name": "a", "scope": "everyone"}]}, "use one of principal, session, value"),
        ({"slots": [{"name": "a", "scope": "value"}]}, 'needs value = "..."'),
        ({"slots": [{"name": "a"}, {"name": "a"}]}, "a appear twice"),
        ({"slots": [{"name": "a", "options": "path=x"}]}, "'options' must be a table"),
        ({"principal": " "}, "'principal' is blank"),
    ],
)
def test_bad_configuration_is_an_invalid_request_that_says_how_to_fix_it(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        parse_server_config(table, source="mcp.toml")


def test_a_missing_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="does not exist"):
        load_server_config(tmp_path / "nope.toml")


def _docs_blocks(kind: str) -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(rf"^```{kind}\n(.*?)^```", text, re.M | re.S)]


def test_the_docs_mcp_toml_samples_load(tmp_path: Path) -> None:
    blocks = [b for b in _docs_blocks("toml") if b.startswith("# mcp.toml")]
    assert blocks, "docs/agent-builders/mcp.md shows an mcp.toml"
    for block in blocks:
        path = tmp_path / "mcp.toml"
        path.write_text(block, encoding="utf-8")
        assert load_server_config(path).slots


def test_the_docs_desktop_config_starts_a_server_that_checks_out(tmp_path: Path) -> None:
    import json

    blocks = [json.loads(b) for b in _docs_blocks("json") if "mcpServers" in b]
    assert blocks, "docs/agent-builders/mcp.md shows a desktop client config"
    server = blocks[0]["mcpServers"]["memvault"]
    assert server["command"] == "memvault"
    args = [a for a in server["args"]]
    proc = subprocess.run(
        memvault_command(
            "--provider", "memory", *args[: args.index("mcp") + 1], "--check", *args[args.index("mcp") + 1 :]
        ),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stdio: principal" in proc.stdout


def test_http_on_a_public_address_without_tokens_refuses_to_start(tmp_path: Path) -> None:
    proc = subprocess.run(
        memvault_command("--provider", "memory", "mcp", "--transport", "http", "--host", "0.0.0.0"),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "refusing to serve on 0.0.0.0 without any token" in proc.stderr


def test_the_docs_http_table_states_every_limit_and_its_default(tmp_path: Path) -> None:
    """The [http] sample in mcp.md lists every HttpLimits setting with its real default."""
    import attrs

    from memvault_mcp.config import HttpLimits

    block = next(b for b in _docs_blocks("toml") if b.startswith("# mcp.toml") and "[http]" in b)
    path = tmp_path / "mcp.toml"
    path.write_text(block, encoding="utf-8")
    assert load_server_config(path).http == HttpLimits()
    for limit in attrs.fields(HttpLimits):
        assert re.search(rf"^{limit.name} = ", block, re.M), limit.name


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "true", '"5"'])
def test_an_http_limit_that_is_not_a_positive_finite_number_is_refused_naming_it(value: str) -> None:
    with pytest.raises(InvalidRequest, match="max_per_slot") as raised:
        parse_server_config(tomllib.loads(f"[http]\nmax_per_slot = {value}\n"))
    assert raised.value.field.endswith("max_per_slot")


def test_an_unknown_http_key_is_refused_naming_it() -> None:
    with pytest.raises(InvalidRequest, match="max_per_slt"):
        parse_server_config({"http": {"max_per_slt": 3}})
