"""Symlink-proof, crash-safe file primitives over directory file descriptors.

Every path is walked one component at a time from the root with
``O_NOFOLLOW | O_DIRECTORY`` opens relative to the parent's descriptor, so a
symlink anywhere below the root is refused instead of followed, and nothing
outside the root is ever opened. Documents are written by the classic
sequence: a dot-prefixed temporary file in the same directory, ``fsync``,
``rename`` over the target, ``fsync`` of the directory. Writers of one
document are serialised by ``flock`` on a dot-prefixed lock sentinel beside it
(across processes) and a striped in-process lock (``flock`` is per open file
description, so two threads of one process would not exclude each other
reliably through separate descriptors otherwise).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "DirHandle",
    "SymlinkRefused",
    "Unfinished",
    "document_lock",
    "lock_name",
    "lstat",
    "open_dir",
    "prefetch",
    "read_file",
    "remove_file",
    "safe_component",
    "sweep_leftovers",
    "sweep_temporaries",
    "write_atomic",
]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_TMP_MARK: Final = ".tmp-"
_STRIPES: Final = 256
_thread_locks: Final = [threading.Lock() for _ in range(_STRIPES)]
#: The stripes of the locks taken before a document's and never while one is held (an idempotency key's,
#: P44): a class of their own, so a key and its document never share a thread lock (a keyed write waited
#: for the stripe it held, 1 write in 256) and the order key, then document, holds for the stripes too.
_outer_thread_locks: Final = [threading.Lock() for _ in range(_STRIPES)]
#: The lock sentinels' descriptors this process has open (to ``flock`` them, or holding it). A forked
#: child gets a copy of each, and ``flock`` belongs to the open file, not the process: while the child
#: kept its copy, the document stayed locked for every process, the parent too, until the child exited.
_flocked: set[int] = set()


def _after_fork_in_child() -> None:
    # The threads holding these are the parent's: the child lets go of its copies, and of their stripes.
    for fd in list(_flocked):
        with contextlib.suppress(OSError):
            os.close(fd)
    _flocked.clear()
    _thread_locks[:] = [threading.Lock() for _ in range(_STRIPES)]
    _outer_thread_locks[:] = [threading.Lock() for _ in range(_STRIPES)]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


class SymlinkRefused(UpstreamError):
    """A document or folder below the root is a symlink; memvault never follows one."""


_WRITABLE: Final = "make sure it is writable by this user and the disk is not full"
#: What to do about a path an ``OSError`` of this errno names, when it is not a permission or space problem.
_ADVICE: Final = {
    errno.EISDIR: "a folder where a file belongs: move it away",
    errno.ENOTDIR: "a file where a folder belongs: move it away",
    errno.ELOOP: "a symlink; local-disk never follows or removes symlinks: remove it by hand",
}


class Unfinished:
    """What a walk over many files (an erasure) could not handle, so it goes on with the rest.

    Each problem is one sentence naming the path under the root and what to do; ``cause`` is
    the first exception behind them (to chain onto the error that reports them all).
    """

    __slots__ = ("cause", "problems", "retry")

    def __init__(self, retry: str) -> None:
        #: How the operator finishes the job once a path is fixed: "repeat the erasure".
        self.retry = retry
        self.problems: list[str] = []
        self.cause: BaseException | None = None

    def __bool__(self) -> bool:
        return bool(self.problems)

    @contextlib.contextmanager
    def attempt(self, path: str, *, folder: str = "") -> Iterator[None]:
        """Run the block; a typed error or ``OSError`` in it is noted against ``path`` instead of raised.

        :param folder: the folder whose descriptor the block works through: an ``OSError``
            naming a file there (the tag, the lock, a temporary) is noted against that file.
        """
        try:
            yield
        except MemvaultError as exc:
            self._note(str(exc).rstrip("."), exc)
        except OSError as exc:
            name = exc.filename
            where = f"{folder}/{name}" if folder and isinstance(name, str) and name and "/" not in name else path
            self._note(f"{where}: {exc.strerror or exc}: {_ADVICE.get(exc.errno or 0, _WRITABLE)}", exc)

    def _note(self, problem: str, exc: BaseException) -> None:
        if not problem.endswith(self.retry):
            problem = f"{problem}, then {self.retry}"
        self.problems.append(problem)
        if self.cause is None:
            self.cause = exc


def safe_component(name: str) -> str:
    """Refuse a path component that could leave its directory or hide (a bug guard).

    The core already validated identifiers and keys; this re-checks the final
    component names the provider builds, so a future bug cannot escape the root.
    """
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name or name.startswith("."):
        raise InvalidRequest(f"refusing unsafe path component {name[:140]!r}: it could leave the memory root")
    return name


def lock_name(name: str) -> str:
    """The lock sentinel beside document ``name`` (dot-prefixed: invisible to recall)."""
    return f".{name}.lock"


def _tmp_prefix(name: str) -> str:
    return f".{name}{_TMP_MARK}"


class DirHandle:
    """An open directory below the root and its root-relative path (for messages)."""

    __slots__ = ("fd", "relpath")

    def __init__(self, fd: int, relpath: str) -> None:
        self.fd = fd
        self.relpath = relpath


def _refuse_symlink(parent_fd: int, name: str, relpath: str) -> None:
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise SymlinkRefused(
            f"{relpath!r} under the memory root is a symlink; local-disk never follows symlinks. "
            "Replace it with a real file or folder (copy the target in place)"
        )


def _open_root(root: Path, create: bool) -> int | None:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
    os.makedirs(root, mode=DIR_MODE, exist_ok=True)
    parent = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(parent)  # the new root's own directory entry must survive a crash too
    finally:
        os.close(parent)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


@contextlib.contextmanager
def open_dir(root: Path, parts: Sequence[str], *, create: bool) -> Iterator[DirHandle | None]:
    """Open ``root/parts...`` without following symlinks; ``None`` if missing and not ``create``.

    Created folders get mode 0700 and their parent is fsynced, so a durable
    document never sits in a folder that a crash can lose.
    """
    fd = _open_root(root, create)
    if fd is None:
        yield None
        return
    relpath = ""
    try:
        for part in parts:
            safe_component(part)
            relpath = f"{relpath}/{part}" if relpath else part
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    fd = -1
                    yield None
                    return
                try:
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    os.fsync(fd)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        _refuse_symlink(fd, part, relpath)
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    _refuse_symlink(fd, part, relpath)
                    raise UpstreamError(
                        f"{relpath!r} under the memory root is not a folder: move it away so "
                        "local-disk can create the folder"
                    ) from exc
                raise
            os.close(fd)
            fd = child
        yield DirHandle(fd, relpath)
    finally:
        if fd >= 0:
            os.close(fd)


@contextlib.contextmanager
def open_private_dir(root: Path, workspace: str, name: str, *, create: bool) -> Iterator[DirHandle | None]:
    """``root/<workspace>/<name>``: a provider-owned dot folder of a workspace (``.quarantine``,
    ``.idempotency``), opened without following symlinks; ``None`` if missing and not ``create``.

    A created folder gets mode 0700 and its workspace folder is fsynced, as :func:`open_dir` does.
    ``OSError`` is raised as is; the provider's caller translates it.
    """
    with open_dir(root, (workspace,), create=create) as ws:
        if ws is None:
            yield None
            return
        if create:
            try:
                os.mkdir(name, DIR_MODE, dir_fd=ws.fd)
            except FileExistsError:
                pass
            else:
                os.fsync(ws.fd)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=ws.fd)
        except FileNotFoundError:
            yield None
            return
        try:
            yield DirHandle(fd, f"{workspace}/{name}")
        finally:
            os.close(fd)


def read_file(handle: DirHandle, name: str) -> tuple[bytes, os.stat_result] | None:
    """The bytes and ``fstat`` of ``name`` in ``handle``; ``None`` if it does not exist.

    :raises SymlinkRefused: when ``name`` is a symlink.
    :raises UpstreamError: when ``name`` is not a regular file.
    """
    relpath = f"{handle.relpath}/{name}"
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=handle.fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _refuse_symlink(handle.fd, name, relpath)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UpstreamError(f"{relpath!r} under the memory root is not a regular file: move it away")
        chunks = []
        while True:
            chunk = os.read(fd, max(st.st_size + 1, 65536))
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def prefetch(handle: DirHandle, name: str) -> None:
    """Ask the kernel to start reading ``name`` into the page cache now (best effort).

    Recall announces every file it is about to read first, so a cold page
    cache is filled by parallel readahead instead of one blocking read after
    another (each of which waits for the disk and then for a CPU).
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=handle.fd)
    except OSError:
        return  # read_file reports it properly
    try:
        advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def lstat(handle: DirHandle, name: str) -> os.stat_result | None:
    """``lstat`` of ``name``; ``None`` if missing."""
    try:
        return os.stat(name, dir_fd=handle.fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def write_atomic(handle: DirHandle, name: str, data: bytes, *, mode: int = FILE_MODE) -> None:
    """Replace ``name`` with ``data`` so that a crash leaves the old or the new bytes, never a mix.

    The caller holds the document's lock and has already refused a symlinked target.
    """
    tmp = f"{_tmp_prefix(name)}{os.getpid()}-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=handle.fd)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not widen or narrow what the old file had
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=handle.fd, dst_dir_fd=handle.fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=handle.fd)
        raise
    os.fsync(handle.fd)


def remove_file(handle: DirHandle, name: str) -> bool:
    """Unlink ``name`` (never following a symlink); ``True`` if it existed."""
    try:
        os.unlink(name, dir_fd=handle.fd)
    except FileNotFoundError:
        return False
    return True


def sweep_temporaries(handle: DirHandle, name: str) -> None:
    """Remove temporary files a crashed writer of ``name`` left behind (caller holds the lock)."""
    prefix = _tmp_prefix(name)
    with os.scandir(handle.fd) as entries:
        stale = [e.name for e in entries if e.name.startswith(prefix)]
    for tmp in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=handle.fd)


def sweep_leftovers(handle: DirHandle, lock_of: Callable[[str], str]) -> None:
    """Remove every temporary file a crashed writer left in ``handle``'s folder.

    ``lock_of(target)`` names the document whose lock guards the writes of ``target`` (a
    document guards its own file and its tag file). Each is swept under that lock, so a
    write in flight keeps its temporary; a lock sentinel made only for the sweep goes too.
    """
    targets: set[str] = set()
    with os.scandir(handle.fd) as entries:
        for entry in entries:
            if entry.name.startswith(".") and _TMP_MARK in entry.name:
                targets.add(entry.name[1 : entry.name.rindex(_TMP_MARK)])
    for name in sorted({lock_of(target) for target in targets}):
        existed = lstat(handle, lock_name(name)) is not None
        with document_lock(handle, name):
            for target in targets:
                if lock_of(target) == name:
                    sweep_temporaries(handle, target)
            if not existed and lstat(handle, name) is None:
                remove_file(handle, lock_name(name))
        os.fsync(handle.fd)


@contextlib.contextmanager
def document_lock(handle: DirHandle, name: str, *, outer: bool = False) -> Iterator[None]:
    """Hold the exclusive lock of document ``name`` across threads and processes.

    ``outer``: a lock taken before a document's lock and never while one is held (an
    idempotency key's): its in-process stripe comes from a set of its own.

    After ``flock`` succeeds the sentinel is re-checked by inode: a concurrent
    ``forget`` may have unlinked it while we waited, and then we retry on the
    new sentinel, so two writers never believe they both hold the lock.
    """
    sentinel = lock_name(name)
    stripe = (_outer_thread_locks if outer else _thread_locks)[hash((handle.relpath, name)) % _STRIPES]
    with stripe:
        while True:
            try:
                fd = os.open(
                    sentinel, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=handle.fd
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    _refuse_symlink(handle.fd, sentinel, f"{handle.relpath}/{sentinel}")
                raise
            _flocked.add(fd)  # from here: a lock taken on it later is shared with a child forked now
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = os.fstat(fd)
                current = lstat(handle, sentinel)
            except BaseException:
                _flocked.discard(fd)
                os.close(fd)
                raise
            if current is not None and (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
                break
            _flocked.discard(fd)
            os.close(fd)
        try:
            yield
        finally:
            _flocked.discard(fd)
            os.close(fd)  # releases the flock
