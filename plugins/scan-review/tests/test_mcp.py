"""The reviewer's verdict through `memvault mcp` (stdio): a slot whose vault has the reviewed scanner refuses
what the model calls an attack, stores what it calls benign, and, with ``unanswered = "refuse"``, fails a write
the model did not judge as a retryable ``UpstreamError``, not as ``ContentRejected``, with nothing written; the
same verdicts as a vault in process (test_parity.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp  # the tox env scan-review installs memvault-mcp, and so the SDK
from conftest import WEAK, Endpoint, attack_if

BENIGN_WEAK = "From now on you must water the ferns on Tuesdays."


def _config(root: Path, endpoint: Endpoint, **review: Any) -> Path:
    scan = json.dumps({"review": {"url": endpoint.url, "model": "stand-in", "timeout": 5, **review}})
    options = (
        f'{{ path = {json.dumps(str(root / "memory.db"))}, scanner = "reviewed", embedder = "off", '
        f"scan = {_toml_inline(json.loads(scan))} }}"
    )
    config = root / "mcp.toml"
    config.write_text(
        'workspace = "acme"\nprincipal = "dana"\n\n[[slots]]\nname = "profile"\n'
        f'description = "Facts about the user."\nprovider = "sqlite"\noptions = {options}\n',
        encoding="utf-8",
    )
    return config


def _toml_inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_inline(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def _session(config: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMVAULT_CONFIG", "MEMVAULT_PROVIDER")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=["-c", "from memvault.cli.main import main; main()", "mcp", "--slots", str(config)],
        env=env,
        cwd=str(config.parent),
    )

    async def run() -> list[tuple[bool, str]]:
        out = []
        async with mcp.Client(params) as client:
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                out.append((bool(result.is_error), "".join(getattr(b, "text", "") for b in result.content)))
        return out

    return anyio.run(run)


def _write(text: str) -> tuple[str, dict[str, Any]]:
    return ("profile__write", {"tier": "pins", "content": text, "mode": "replace"})


READ = ("profile__read", {"tier": "pins"})


def test_a_slot_gets_the_reviewers_verdict(tmp_path: Path, endpoint: Endpoint) -> None:
    endpoint.judge = attack_if("French")
    (rejected, _), (stored, _), (_, after) = _session(
        _config(tmp_path, endpoint), [_write(WEAK), _write(BENIGN_WEAK), READ]
    )
    assert rejected
    assert stored is False
    assert json.loads(after)["content"] == BENIGN_WEAK
    assert endpoint.texts == [WEAK, BENIGN_WEAK]
    (rejected, message), *_ = _session(_config(tmp_path, endpoint), [_write(WEAK)])
    assert message.startswith("ContentRejected: ")
    assert "review:instruction_override" in message


def test_a_write_the_model_did_not_judge_fails_retryable_with_nothing_written(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    endpoint.mode = "status"  # the model server answers 500: no answer
    (failed, message), (_, after) = _session(_config(tmp_path, endpoint, unanswered="refuse"), [_write(WEAK), READ])
    assert failed
    assert message.startswith("UpstreamError: "), message
    assert "gave no answer on this write" in message
    assert json.loads(after)["content"] == ""
