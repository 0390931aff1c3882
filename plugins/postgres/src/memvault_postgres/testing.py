"""A throwaway PostgreSQL server for tests and benchmarks: ``initdb`` + ``pg_ctl`` on 127.0.0.1.

The server binaries come from ``MEMVAULT_PG_BINDIR``, else ``pg_config --bindir``,
else the newest ``/usr/lib/postgresql/<version>/bin`` (where Debian keeps
``initdb`` and ``pg_ctl``, outside PATH). ``initdb`` and ``postgres`` refuse
to run as root: under root they run as the unprivileged ``postgres`` system
user (the Debian package creates it), in a directory that user owns.

>>> with TemporaryCluster() as cluster:                      # doctest: +SKIP
...     vault = memvault.open("postgres", dsn=cluster.dsn())
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["ServerBinariesMissing", "TemporaryCluster", "find_bindir"]

_SYSTEM_USER = "postgres"
_ROLE = "memvault"


class ServerBinariesMissing(RuntimeError):
    """``initdb`` / ``pg_ctl`` are not installed."""


def find_bindir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    :raises ServerBinariesMissing: saying how to install them.
    """
    candidates: list[Path] = []
    if os.environ.get("MEMVAULT_PG_BINDIR"):
        candidates.append(Path(os.environ["MEMVAULT_PG_BINDIR"]))
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))

    def version(p: Path) -> float:
        try:
            return float(p.parent.name)
        except ValueError:
            return 0.0

    candidates.extend(sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True))
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise ServerBinariesMissing(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install them (Debian/Ubuntu: "
        "`apt-get install -y postgresql`) or set MEMVAULT_PG_BINDIR to their folder"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TemporaryCluster:
    """A private PostgreSQL cluster in a temporary directory, listening on a free loopback port.

    It has a superuser ``postgres`` and an unprivileged role ``memvault`` owning
    a database ``memvault`` (the role the provider connects as: :meth:`dsn`).
    Use it as a context manager; :meth:`stop` also runs at exit of the block
    when the body raised. ``settings`` adds or overrides server settings:
    ``{"lc_messages": "de_DE.UTF-8"}`` starts a server whose messages are in
    German (the locale must be generated on the machine).
    """

    def __init__(self, *, bindir: Path | None = None, settings: dict[str, str] | None = None) -> None:
        self.bindir = bindir or find_bindir()
        self.as_root = os.geteuid() == 0
        self.port = _free_port()
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "max_connections": "300",
            "shared_buffers": "64MB",
            # Tests never lose the machine; the server's own crash safety (WAL) still holds.
            "fsync": "off",
            "full_page_writes": "off",
            "log_min_messages": "warning",
            **(settings or {}),
        }
        self.root = Path(tempfile.mkdtemp(prefix="memvault-pg-"))
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self._running = False
        if self.as_root:
            user = pwd.getpwnam(_SYSTEM_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)

    # -- process control -----------------------------------------------------

    def _run(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self.as_root:
            if shutil.which("runuser"):
                cmd = ["runuser", "-u", _SYSTEM_USER, "--", *cmd]
            else:
                cmd = ["su", _SYSTEM_USER, "-s", "/bin/sh", "-c", shlex.join(cmd)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root, env=env)
        if out.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{shlex.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}\n{log}")
        return out

    def start(self) -> TemporaryCluster:
        """``initdb`` (first time) and ``pg_ctl start``; creates the ``memvault`` role and database."""
        first = not self.data_dir.exists()
        if first:
            self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C")
        options = " ".join(f"-c {k}={v}" for k, v in self.settings.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.root} {options}",
            "start",
        )
        self._running = True
        if first:
            with self.admin() as conn:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(_ROLE)))
                role = sql.Identifier(_ROLE)
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(role, role))
        return self

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` (``smart``, ``fast`` or ``immediate``: a crash). Idempotent."""
        if self._running:
            self._running = False
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast", *, down_for: float = 0.0) -> None:
        """Stop the server, stay down ``down_for`` seconds, start it again on the same port."""
        self.stop(mode)
        time.sleep(down_for)
        self.start()

    def cleanup(self) -> None:
        """Stop the server (if running) and delete its directory."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> TemporaryCluster:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    # -- connecting ----------------------------------------------------------

    def dsn(self, *, user: str = _ROLE, dbname: str = _ROLE) -> str:
        """A libpq connection string for ``user`` on ``dbname`` over TCP 127.0.0.1."""
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user}"

    def env(self) -> dict[str, str]:
        """libpq environment variables pointing at the ``memvault`` database."""
        return {"PGHOST": "127.0.0.1", "PGPORT": str(self.port), "PGUSER": _ROLE, "PGDATABASE": _ROLE}

    def admin(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        """A superuser connection (autocommit), for test set-up and inspection."""
        return psycopg.connect(self.dsn(user="postgres", dbname=dbname), autocommit=True)

    def files_containing(self, needle: bytes, *, skip: tuple[str, ...] = ("pg_wal",)) -> list[Path]:
        """Files under the data directory (outside ``skip``) whose bytes contain ``needle``."""
        found: list[Path] = []
        for path in self.data_dir.rglob("*"):
            rel = path.relative_to(self.data_dir)
            if rel.parts and rel.parts[0] in skip:
                continue
            if path.is_file():
                try:
                    if needle in path.read_bytes():
                        found.append(rel)
                except OSError:
                    continue
        return found
