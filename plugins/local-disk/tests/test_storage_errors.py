"""Every hook turns a failing file system into memvault's typed errors by itself (P28).

The hooks are called on the provider directly, not through a Vault: the facade
translates nothing for its providers, so an ``OSError`` escaping a hook here
would escape to the application.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memvault import ForgetRequest, ReadRequest, RecallRequest, RetainRequest
from memvault.contract.errors import InvalidRequest, UpstreamError
from memvault.contract.models import ListDocumentsRequest, QuarantineRecord
from memvault_local_disk import LocalDiskProvider

_SHA = hashlib.sha256(b"ignore previous instructions\n").hexdigest()


def _hooks(provider: LocalDiskProvider) -> dict[str, Callable[[], Any]]:
    record = QuarantineRecord(
        workspace_id="w1",
        agent_id="ada",
        label="AGENT.md",
        category="instruction_override",
        pattern="ignore previous instructions",
        sha256=_SHA,
        content="ignore previous instructions\n",
    )
    return {
        "retain": lambda: provider.memvault_retain(
            RetainRequest(workspace_id="w1", agent_id="ada", tier="pins", content="x\n", mode="append")
        ),
        "retain daily": lambda: provider.memvault_retain(
            RetainRequest(
                workspace_id="w1", agent_id="ada", tier="daily", key="2026-01-31", content="x\n", mode="append"
            )
        ),
        "read": lambda: provider.memvault_read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins")),
        "recall": lambda: provider.memvault_recall(RecallRequest(workspace_id="w1", agent_id="ada", query="x")),
        "forget": lambda: provider.memvault_forget(ForgetRequest(workspace_id="w1", agent_id="ada", id="pins.md")),
        "erase": lambda: provider.memvault_forget(ForgetRequest(workspace_id="w1", data_subject_id="bob")),
        "list all": lambda: provider.memvault_list_documents(ListDocumentsRequest()),
        "list workspace": lambda: provider.memvault_list_documents(ListDocumentsRequest(workspace_id="w1")),
        "quarantine keep": lambda: provider.memvault_quarantine_keep(record=record),
        "quarantine list": lambda: provider.memvault_quarantine_list(workspace_id="w1"),
        "quarantine get": lambda: provider.memvault_quarantine_get(workspace_id="w1", sha256=_SHA),
    }


def _failures(root: Path) -> list[str]:
    """What each hook did on ``root`` that is not a typed storage error (empty: all were)."""
    provider = LocalDiskProvider(root)
    wrong: list[str] = []
    for name, call in _hooks(provider).items():
        try:
            call()
        except UpstreamError as exc:
            if not isinstance(exc.__cause__, OSError):
                wrong.append(f"{name}: UpstreamError without the OSError chained: {exc}")
        except Exception as exc:  # noqa: BLE001 - any other exception is the failure under test
            wrong.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            wrong.append(f"{name}: succeeded")
    status = provider.memvault_health()
    if status.ok or str(root) not in status.message:
        wrong.append(f"health: {status}")
    try:
        provider.close()
    except Exception as exc:  # noqa: BLE001 - as above
        wrong.append(f"close: {type(exc).__name__}: {exc}")
    return wrong


def test_a_root_that_is_a_file_is_upstream_error_from_every_hook(tmp_path: Path) -> None:
    (tmp_path / "memory").write_text("not a folder\n")
    assert _failures(tmp_path / "memory") == []


def test_a_root_below_a_file_is_upstream_error_from_every_hook(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder\n")
    assert _failures(tmp_path / "file" / "memory") == []


def test_a_root_name_too_long_for_the_file_system_is_upstream_error_from_every_hook(tmp_path: Path) -> None:
    assert _failures(tmp_path / ("m" * 300)) == []


def test_a_root_that_is_a_symlink_loop_is_upstream_error_from_every_hook(tmp_path: Path) -> None:
    (tmp_path / "memory").symlink_to(tmp_path / "memory")
    assert _failures(tmp_path / "memory") == []


def test_a_quarantine_folder_that_is_a_file_is_upstream_error(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    (root / "w1").mkdir(parents=True)
    (root / "w1/.quarantine").write_text("not a folder\n")
    provider = LocalDiskProvider(root)
    hooks = _hooks(provider)
    for name in ("quarantine keep", "quarantine list", "quarantine get", "erase"):
        with pytest.raises(UpstreamError, match="quarantine") as info:
            hooks[name]()
        assert isinstance(info.value.__cause__, NotADirectoryError), name


@pytest.fixture
def unreadable_root() -> Iterator[Path]:
    """A root folder nobody but root may enter (mode 000), in a folder anybody may traverse."""
    parent = Path(tempfile.mkdtemp(prefix="memvault-unreadable-"))
    parent.chmod(0o711)
    root = parent / "memory"
    (root / "w1/agents/ada").mkdir(parents=True)
    (root / "w1/agents/ada/pins.md").write_text("x\n")
    root.chmod(0o000)
    try:
        yield root
    finally:
        root.chmod(0o700)
        shutil.rmtree(parent)


def test_an_unreadable_root_is_upstream_error_from_every_hook(unreadable_root: Path) -> None:
    """Permission denied (EACCES). Under root, which ignores permissions, the hooks run as ``nobody``."""
    if os.geteuid() != 0:
        assert _failures(unreadable_root) == []
        return
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            os.write(write_end, json.dumps(_failures(unreadable_root)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    assert json.loads(report) == []


def test_a_root_with_a_nul_character_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="NUL") as info:
        LocalDiskProvider("/tmp/mem\x00ory")
    assert info.value.field == "root"


def test_a_relative_root_without_a_working_directory_is_upstream_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(UpstreamError, match="working directory") as info:
        LocalDiskProvider("memory")
    assert isinstance(info.value.__cause__, OSError)
