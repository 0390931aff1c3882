"""Fixtures shared by the cross-distribution tests."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

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


class LinePump:
    """Every line a child process writes, read by a thread as it comes, so none waits in a buffer.

    Polling the pipe with ``select`` and then calling ``readline`` can lose the race: when
    two lines arrive in one read (the server's warning on stderr and its "listening on"
    on stdout, merged), ``readline`` returns the first and keeps the second in its buffer,
    where ``select`` never sees it. The thread also drains the pipe for as long as the
    process runs, so a chatty server never blocks on a full pipe.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str] | None:
        """The first match of ``pattern`` in a line read from now on, or None at timeout or end of output."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            self.lines.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        return None


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
    pump = LinePump(proc.stdout)
    try:
        found = pump.wait_for(r"listening on (http://\S+)", INSTALL_DEADLINE)
        if found is None:
            _stop(proc)
            pytest.fail(f"README's first command did not start the server:\n$ {command}\n{''.join(pump.lines[-40:])}")
        yield ReadmeService(checkout=checkout, venv=checkout / ".venv", url=found.group(1), output=pump.lines)
    finally:
        code = _stop(proc)
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
