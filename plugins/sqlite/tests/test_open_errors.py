"""A bad path is a clear memvault error at open, never a raw traceback (P27, P28)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import memvault


def test_missing_directory_is_invalid_request_naming_it(tmp_path: Path) -> None:
    with pytest.raises(memvault.InvalidRequest, match="does not exist"):
        memvault.open("sqlite", path=str(tmp_path / "nope" / "m.db"), scanner="off")


def test_non_sqlite_file_is_invalid_request(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("just some notes, not a database\n" * 100)
    with pytest.raises(memvault.InvalidRequest, match="not a SQLite database"):
        memvault.open("sqlite", path=str(bogus), scanner="off")


def test_directory_as_path_is_invalid_request(tmp_path: Path) -> None:
    with pytest.raises(memvault.InvalidRequest, match="directory"):
        memvault.open("sqlite", path=str(tmp_path), scanner="off")


@pytest.mark.skipif(os.geteuid() == 0, reason="root bypasses directory permissions")
def test_unwritable_directory_is_upstream_error(tmp_path: Path) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(memvault.UpstreamError, match="not writable"):
            memvault.open("sqlite", path=str(locked / "m.db"), scanner="off")
    finally:
        locked.chmod(0o700)


def test_bad_synchronous_setting_is_invalid_request(tmp_path: Path) -> None:
    with pytest.raises(memvault.InvalidRequest, match="synchronous"):
        memvault.open("sqlite", path=str(tmp_path / "m.db"), synchronous="sometimes", scanner="off")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs a read-only sysfs")
def test_path_on_read_only_filesystem_is_upstream_error() -> None:
    with pytest.raises(memvault.UpstreamError, match="writable"):
        memvault.open("sqlite", path="/sys/memvault-test.db", scanner="off")
