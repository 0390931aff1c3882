"""A full disk under a sqlite store: health says so, and a write that fails says what to do (P25, P27, P28).

The file system is a real one of 2 MiB (tmpfs, mounted by the test: root only,
as CI runs; skipped where mounting is not allowed).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import memvault


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 512):  # then the last few blocks
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def _append(vault: memvault.Vault, n: int) -> None:
    vault.retain(
        memvault.RetainRequest(
            workspace_id="w",
            agent_id="a",
            tier="daily",
            key="2024-01-01",
            content=f"line {n} " * 50 + "\n",
            mode="append",
        )
    )


def test_health_says_the_disk_is_full_and_recovers(small_disk: Path) -> None:
    with memvault.open("sqlite", path=str(small_disk / "m.db")) as vault:
        _append(vault, 0)
        assert vault.health().ok
        filler = _fill(small_disk)
        failed = None
        for n in range(1, 200):  # until a commit needs a page the disk does not have
            try:
                _append(vault, n)
            except memvault.UpstreamError as exc:
                failed = exc
                break
        assert failed is not None, "every write fit on a full disk"
        assert "full" in str(failed)
        assert "free space" in str(failed)
        health = vault.health()
        assert not health.ok
        assert "full" in health.message
        filler.unlink()
        assert vault.health().ok
        _append(vault, 1000)
        assert (
            "line 1000"
            in vault.read(memvault.ReadRequest(workspace_id="w", agent_id="a", tier="daily", key="2024-01-01")).content
        )
