"""Recall by meaning for local-disk (contract P36-P40): a sidecar of vectors beside each document.

The vectors of document ``<name>`` live in ``.<name>.vectors`` beside it (dot-prefixed: a
provider file, never listed, recalled or exported). The sidecar holds vectors of one model::

    memvault-vectors 1\\n
    {"model": "<model id>", "dimensions": D, "count": N, "sha256": "<of the records>"}\\n
    N records: line number (uint32 LE), line_digest of its text (8 bytes), the vector (D float16 LE)

It is derived data: written with :func:`memvault_local_disk.fs.write_atomic` under the
document's lock (a crash leaves the old or the new sidecar), removed with its document (forget,
erasure) and by a replace, which changes any line. An entry counts only while its line's
current text has its digest, so an append (which changes at most the stored last line) keeps
the others, and a file edited by hand never answers with a vector of text it no longer holds.
A sidecar that cannot be read or parsed (edited, truncated, another format) counts as no
vectors: its document's lines are pending again, and a recall never fails for it.

A line is pending while its document is indexed (:func:`indexed_lines`) and the sidecar has no
entry of the model for the line's current text: the backlog survives a restart by construction,
and another process's writes are seen through the files' ``stat``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from attrs import frozen

from memvault.contract.embedding import PendingLine, line_digest
from memvault.contract.errors import MemvaultError
from memvault.contract.forking import after_fork_in_child
from memvault.contract.terms import tokenize
from memvault_local_disk import fs
from memvault_local_disk.index import RACY_NS

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]
else:
    Matrix = Any

__all__ = ["SUFFIX", "Sidecar", "VectorFiles", "decode_sidecar", "encode_sidecar", "indexed_lines", "sidecar_name"]

log = logging.getLogger("memvault_local_disk")

#: The sidecar of document ``<name>`` is ``.<name>`` + SUFFIX.
SUFFIX: Final = ".vectors"
_MAGIC: Final = b"memvault-vectors 1\n"
_DIGEST_BYTES: Final = 8  # line_digest is 16 hex characters
_MAX_HEADER: Final = 1024
#: Documents whose indexed lines the pending hook keeps (a drain hands out 64 lines at a time).
_LINES_KEPT: Final = 8
#: Validated sidecars a recall keeps, by document (parsed vectors of current lines).
_SEARCH_KEPT: Final = 4096

_StatKey = tuple[int, int, int, int, int]
_Path = tuple[str, ...]


def sidecar_name(name: str) -> str:
    """The sidecar beside document ``name``."""
    return f".{name}{SUFFIX}"


def document_of(sidecar: str) -> str | None:
    """The document a sidecar name belongs to (``None``: not a sidecar name)."""
    if sidecar.startswith(".") and sidecar.endswith(SUFFIX) and len(sidecar) > 1 + len(SUFFIX):
        return sidecar[1 : -len(SUFFIX)]
    return None


def indexed_lines(body: str) -> list[tuple[int, str]]:
    """``(number, text)`` of the lines :func:`memvault.search.index_document` indexes (those with a token)."""
    return [(number, line) for number, line in enumerate(body.splitlines(), start=1) if tokenize(line)]


@frozen
class Sidecar:
    """A parsed sidecar: its model, and per line number the digest of the text and the vector bytes."""

    model_id: str
    dimensions: int
    entries: dict[int, tuple[str, bytes]]


def encode_sidecar(model_id: str, dimensions: int, entries: dict[int, tuple[str, bytes]]) -> bytes:
    """The bytes of a sidecar holding ``entries`` (numbers in order)."""
    records = b"".join(
        number.to_bytes(4, "little") + bytes.fromhex(digest) + blob
        for number, (digest, blob) in sorted(entries.items())
    )
    header = json.dumps(
        {
            "model": model_id,
            "dimensions": dimensions,
            "count": len(entries),
            "sha256": hashlib.sha256(records).hexdigest(),
        },
        separators=(",", ":"),
    ).encode("ascii")
    return _MAGIC + header + b"\n" + records


def decode_sidecar(data: bytes) -> Sidecar | None:
    """A sidecar's content; ``None`` when it is not one intact (edited, truncated, another format)."""
    if not data.startswith(_MAGIC):
        return None
    end = data.find(b"\n", len(_MAGIC), len(_MAGIC) + _MAX_HEADER)
    if end < 0:
        return None
    try:
        header = json.loads(data[len(_MAGIC) : end].decode("ascii"))
        model_id, dimensions, count, checksum = (
            header["model"],
            header["dimensions"],
            header["count"],
            header["sha256"],
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if not (isinstance(model_id, str) and model_id and isinstance(checksum, str)):
        return None
    if not (type(dimensions) is int and type(count) is int and dimensions > 0 and count >= 0):
        return None
    records = memoryview(data)[end + 1 :]
    size = 4 + _DIGEST_BYTES + 2 * dimensions
    if len(records) != count * size or hashlib.sha256(records).hexdigest() != checksum:
        return None
    entries: dict[int, tuple[str, bytes]] = {}
    for at in range(0, len(records), size):
        number = int.from_bytes(records[at : at + 4], "little")
        entries[number] = (
            records[at + 4 : at + 4 + _DIGEST_BYTES].hex(),
            bytes(records[at + 4 + _DIGEST_BYTES : at + size]),
        )
    return Sidecar(model_id=model_id, dimensions=dimensions, entries=entries)


def keep_current_entries(handle: fs.DirHandle, name: str, body: str) -> None:
    """Before a replace writes ``body``: the sidecar keeps only the vectors of lines the new body keeps
    (same number, same text), as the database providers keep those lines' rows; with none left it goes.
    A crash after this and before the document is written leaves only entries true of both bodies."""
    sidecar = read_sidecar(handle, name)
    kept: dict[int, tuple[str, bytes]] = {}
    if sidecar is not None:
        texts = {number: line_digest(line) for number, line in indexed_lines(body)}
        kept = {n: have for n, have in sidecar.entries.items() if texts.get(n) == have[0]}
    if sidecar is None or not kept:
        fs.remove_file(handle, sidecar_name(name))
    elif len(kept) < len(sidecar.entries):
        fs.sweep_temporaries(handle, sidecar_name(name))
        fs.write_atomic(handle, sidecar_name(name), encode_sidecar(sidecar.model_id, sidecar.dimensions, kept))


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)


def _settled(*stats: os.stat_result | None) -> bool:
    """Whether every file changed long enough ago that an equal stat key means equal bytes (see RACY_NS)."""
    now = time.time_ns()
    return all(st is None or now - max(st.st_mtime_ns, st.st_ctime_ns) >= RACY_NS for st in stats)


def read_sidecar(handle: fs.DirHandle, name: str) -> Sidecar | None:
    """The sidecar of document ``name``; ``None`` when there is none or it cannot be used (never raises
    for its content: the lines are then pending again)."""
    try:
        found = fs.read_file(handle, sidecar_name(name))
    except (OSError, MemvaultError) as exc:
        log.warning(
            "the vectors of %s/%s are ignored (its lines wait to be embedded again): %s", handle.relpath, name, exc
        )
        return None
    if found is None:
        return None
    sidecar = decode_sidecar(found[0])
    if sidecar is None:
        log.warning(
            "the vectors of %s/%s are ignored: %s is not an intact sidecar (its lines wait to be embedded again)",
            handle.relpath,
            name,
            sidecar_name(name),
        )
    return sidecar


def _read_lines(handle: fs.DirHandle, name: str) -> list[tuple[int, str]] | None:
    """The indexed lines of document ``name``; ``None`` when it is missing or unusable (recall skips it too)."""
    try:
        found = fs.read_file(handle, name)
        if found is None:
            return None
        return indexed_lines(found[0].decode("utf-8"))
    except (OSError, UnicodeDecodeError, MemvaultError):
        return None


def _missing(
    lines: Sequence[tuple[int, str]], sidecar: Sidecar | None, model_id: str
) -> Iterator[tuple[int, str, str]]:
    """``(number, text, digest)`` of ``lines`` with no vector of ``model_id`` for their text."""
    entries = sidecar.entries if sidecar is not None and sidecar.model_id == model_id else {}
    for number, line in lines:
        digest = line_digest(line)
        have = entries.get(number)
        if have is None or have[0] != digest:
            yield number, line, digest


def _key(parts: _Path, name: str, number: int, digest: str) -> str:
    return json.dumps([*parts, name, number, digest], separators=(",", ":"))


def _parse_key(key: str) -> tuple[_Path, str, int, str] | None:
    try:
        *parts, name, number, digest = json.loads(key)
    except (ValueError, TypeError):
        return None
    if not (3 <= len(parts) <= 4 and all(isinstance(p, str) for p in parts) and parts[1] in ("agents", "crews")):
        return None
    if not (isinstance(name, str) and type(number) is int and isinstance(digest, str) and len(digest) == 16):
        return None
    try:
        fs.safe_component(name)
        bytes.fromhex(digest)
    except (ValueError, MemvaultError):
        return None
    return tuple(parts), name, number, digest


class VectorFiles:
    """The sidecars under one memory root, with caches keyed by ``stat`` (valid across processes)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self._lock = threading.Lock()
        #: document path -> (document stat key, sidecar stat key, model id, lines still pending)
        self._counted: dict[_Path, tuple[_StatKey, _StatKey | None, str, int]] = {}
        #: document path -> (document stat key, indexed lines)
        self._lines: OrderedDict[_Path, tuple[_StatKey, list[tuple[int, str]]]] = OrderedDict()
        #: document path -> (body digest, sidecar stat key, model id, line refs, their vectors, texts by number)
        self._searched: OrderedDict[_Path, tuple[str, _StatKey, str, list[tuple[str, int]], Matrix, dict[int, str]]] = (
            OrderedDict()
        )
        after_fork_in_child(self, VectorFiles._forked)

    def _forked(self) -> None:
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._counted.clear()
            self._lines.clear()
            self._searched.clear()

    # -- pending and backlog ---------------------------------------------------

    def _lines_of(self, handle: fs.DirHandle, path: _Path, name: str, st: os.stat_result) -> list[tuple[int, str]]:
        key = _stat_key(st)
        with self._lock:
            kept = self._lines.get(path)
        if kept is not None and kept[0] == key and _settled(st):
            return kept[1]
        lines = _read_lines(handle, name) or []
        with self._lock:
            self._lines[path] = (key, lines)
            self._lines.move_to_end(path)
            while len(self._lines) > _LINES_KEPT:
                self._lines.popitem(last=False)
        return lines

    def count(self, handle: fs.DirHandle, parts: _Path, name: str, model_id: str) -> int:
        """How many indexed lines of document ``parts/name`` have no vector of ``model_id``."""
        path = (*parts, name)
        doc = fs.lstat(handle, name)
        if doc is None or not stat.S_ISREG(doc.st_mode):
            return 0
        side = fs.lstat(handle, sidecar_name(name))
        doc_key, side_key = _stat_key(doc), (None if side is None else _stat_key(side))
        with self._lock:
            known = self._counted.get(path)
        if known is not None and known[:3] == (doc_key, side_key, model_id):
            return known[3]
        lines = self._lines_of(handle, path, name, doc)
        missing = sum(1 for _ in _missing(lines, read_sidecar(handle, name), model_id))
        if _settled(doc, side):
            with self._lock:
                self._counted[path] = (doc_key, side_key, model_id, missing)
        return missing

    def pending(self, handle: fs.DirHandle, parts: _Path, name: str, model_id: str, limit: int) -> list[PendingLine]:
        """Up to ``limit`` lines of document ``parts/name`` waiting for a vector of ``model_id``."""
        if limit <= 0 or not self.count(handle, parts, name, model_id):
            return []
        doc = fs.lstat(handle, name)
        if doc is None:
            return []
        lines = self._lines_of(handle, (*parts, name), name, doc)
        out = []
        for number, line, digest in _missing(lines, read_sidecar(handle, name), model_id):
            out.append(PendingLine(key=_key(parts, name, number, digest), text=line))
            if len(out) >= limit:
                break
        return out

    # -- store -----------------------------------------------------------------

    def store(self, model_id: str, vectors: Iterable[tuple[str, bytes]]) -> int:
        """Store vectors under the keys :meth:`pending` handed out; a key whose line changed is skipped."""
        groups: dict[tuple[_Path, str], list[tuple[int, str, bytes]]] = {}
        for key, blob in vectors:
            parsed = _parse_key(key)
            if parsed is None or not blob or len(blob) % 2:
                continue
            parts, name, number, digest = parsed
            groups.setdefault((parts, name), []).append((number, digest, bytes(blob)))
        stored = 0
        for (parts, name), items in sorted(groups.items()):
            with fs.open_dir(self.root, parts, create=False) as handle:
                if handle is None or fs.lstat(handle, name) is None:
                    continue  # forgotten meanwhile
                stored += self._store_in(handle, name, model_id, items)
        return stored

    def _store_in(self, handle: fs.DirHandle, name: str, model_id: str, items: list[tuple[int, str, bytes]]) -> int:
        had_lock = fs.lstat(handle, fs.lock_name(name)) is not None
        with fs.document_lock(handle, name):
            current = fs.lstat(handle, name)
            if current is None or not stat.S_ISREG(current.st_mode):
                if current is None and not had_lock:
                    fs.remove_file(handle, fs.lock_name(name))  # made only for this store
                return 0
            texts = {number: line_digest(line) for number, line in _read_lines(handle, name) or []}
            dimensions = len(items[0][2]) // 2
            sidecar = read_sidecar(handle, name)
            entries: dict[int, tuple[str, bytes]] = {}
            if sidecar is not None and sidecar.model_id == model_id and sidecar.dimensions == dimensions:
                # Only entries of the current text stay: the sidecar never keeps vectors of text that went.
                entries = {n: have for n, have in sidecar.entries.items() if texts.get(n) == have[0]}
            stored = 0
            for number, digest, blob in items:
                if texts.get(number) != digest or len(blob) != 2 * dimensions:
                    continue  # the line changed or went since it was handed out (P37)
                entries[number] = (digest, blob)
                stored += 1
            if stored:
                fs.sweep_temporaries(handle, sidecar_name(name))
                fs.write_atomic(handle, sidecar_name(name), encode_sidecar(model_id, dimensions, entries))
        return stored

    # -- recall ----------------------------------------------------------------

    def searched(
        self,
        handle: fs.DirHandle,
        parts: _Path,
        name: str,
        source: str,
        body_digest: str,
        texts: Any,
        model_id: str,
        dimensions: int,
    ) -> tuple[list[tuple[str, int]], Matrix, dict[int, str]]:
        """The vectors of ``model_id`` of document ``parts/name`` whose lines still have their text.

        Kept while the body and the sidecar are unchanged, so a recall over unchanged files
        costs a ``stat`` per document.

        :param source: the document's label (the hits' ``source``).
        :param body_digest: the sha256 of the document's body as recall indexed it.
        :param texts: ``texts(number)``: the text of indexed line ``number`` of that body, ``None`` if none.
        :return: ``(source, line number)`` of each line with a vector, their vectors (float32, one
            row each, in that order) and the lines' texts by number.
        """
        import numpy as np

        empty: tuple[list[tuple[str, int]], Matrix, dict[int, str]] = (
            [],
            np.zeros((0, dimensions), dtype=np.float32),
            {},
        )
        path = (*parts, name)
        try:
            side = fs.lstat(handle, sidecar_name(name))
        except OSError:
            return empty
        if side is None or not stat.S_ISREG(side.st_mode):
            return empty
        side_key = _stat_key(side)
        with self._lock:
            kept = self._searched.get(path)
            if kept is not None and kept[:3] == (body_digest, side_key, model_id):
                self._searched.move_to_end(path)
                return kept[3], kept[4], kept[5]
        sidecar = read_sidecar(handle, name)
        refs: list[tuple[str, int]] = []
        blobs: list[bytes] = []
        lines: dict[int, str] = {}
        if sidecar is not None and sidecar.model_id == model_id and sidecar.dimensions == dimensions:
            for number, (digest, blob) in sorted(sidecar.entries.items()):
                line = texts(number)
                if line is not None and line_digest(line) == digest:
                    refs.append((source, number))
                    blobs.append(blob)
                    lines[number] = line
        from memvault.contract.embedding import vectors_from_bytes

        matrix = vectors_from_bytes(blobs, dimensions)
        if _settled(side):
            with self._lock:
                self._searched[path] = (body_digest, side_key, model_id, refs, matrix, lines)
                while len(self._searched) > _SEARCH_KEPT:
                    self._searched.popitem(last=False)
        return refs, matrix, lines

    def drop(self, parts: _Path, name: str) -> None:
        path = (*parts, name)
        with self._lock:
            self._counted.pop(path, None)
            self._lines.pop(path, None)
            self._searched.pop(path, None)


def remove_orphans(handle: fs.DirHandle) -> None:
    """Remove the sidecars of ``handle``'s folder whose document is gone (deleted by hand, or a crash
    between the two unlinks): vectors of text that no longer exists. Each under its document's lock."""
    with os.scandir(handle.fd) as entries:
        orphans = [d for d in map(document_of, (e.name for e in entries)) if d is not None]
    for name in orphans:
        if fs.lstat(handle, name) is not None:
            continue
        had_lock = fs.lstat(handle, fs.lock_name(name)) is not None
        with fs.document_lock(handle, name):
            if fs.lstat(handle, name) is None:
                fs.remove_file(handle, sidecar_name(name))
                if not had_lock:
                    fs.remove_file(handle, fs.lock_name(name))
        os.fsync(handle.fd)
