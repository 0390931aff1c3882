"""Fixtures shared by the cross-distribution tests."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from attrs import frozen
from readme import copy_repository, install_command

#: The README's first command installs five distributions from source into a fresh
#: venv (about 30 s on this machine with a warm pip cache): a generous bound.
INSTALL_DEADLINE = 600.0
STOP_DEADLINE = 30.0


@frozen
class ReadmeService:
    """A clone on disk, its `.venv` made by the README's first command, and the server it started."""

    checkout: Path
    venv: Path
    url: str
    output: list[str]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


def clean_env() -> dict[str, str]:
    """The caller's environment minus memvault's own variables and the tox env's venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env.pop("VIRTUAL_ENV", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="session")
def readme_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReadmeService]:
    """Run README's first command, as written, in a fresh copy of the repository.

    The one change to the environment: a `memvault.toml` in the clone with
    `[server] port = 0`, so parallel runs never fight over port 8765 (the server
    prints the port it picked). The install uses pip with this machine's
    configured index. The server is stopped with SIGTERM at the end of the session
    and must exit within STOP_DEADLINE.
    """
    checkout = copy_repository(tmp_path_factory.mktemp("clone"))
    (checkout / "memvault.toml").write_text("[server]\nport = 0\n")
    command = install_command()
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=checkout,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    output: list[str] = []
    url = ""
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + INSTALL_DEADLINE
    try:
        while not url and time.monotonic() < deadline:
            if not selector.select(timeout=1.0):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            output.append(line)
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                url = found.group(1)
        if not url:
            _stop(proc)
            pytest.fail(f"README's first command did not start the server:\n$ {command}\n{''.join(output[-40:])}")
        yield ReadmeService(checkout=checkout, venv=checkout / ".venv", url=url, output=output)
    finally:
        code = _stop(proc)
        selector.close()
    assert code in (0, -signal.SIGTERM), f"the server exited {code} on SIGTERM"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(proc: subprocess.Popen[str]) -> int | None:
    """SIGTERM the command's process group (bash and the server); every process must be gone in time."""
    if _group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_DEADLINE
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not _group_alive(proc.pid):
            return proc.returncode
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=STOP_DEADLINE)
    pytest.fail(f"the server did not stop within {STOP_DEADLINE} s of SIGTERM")
