"""The documents recall searches: each file's :class:`~memvault_local_disk.lazy.LazyDocument`,
kept in memory while the file is unchanged.

A file is read again when its ``(size, mtime_ns, inode, dev, ctime_ns)`` differs
from the cached entry's, so an edit with any editor is seen by the next recall.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from memvault.contract.errors import InvalidRequest, UpstreamError
from memvault.contract.forking import after_fork_in_child
from memvault.contract.models import Partition, Tier, parse_label
from memvault_local_disk import fs
from memvault_local_disk.expiry import meta_name, read_meta
from memvault_local_disk.layout import FIXED_FILES, SUBFOLDERS, decode, describe, partition_parts
from memvault_local_disk.lazy import LazyDocument

__all__ = ["DEFAULT_CACHE_BYTES", "RACY_NS", "DocumentIndex", "IndexCache"]

log = logging.getLogger("memvault_local_disk")

DEFAULT_CACHE_BYTES: Final = 64 * 1024 * 1024  # of text; the lazy index takes about 3-4x that in RAM

#: A file whose change time is this close to "now" when it is read may change again within the same
#: timestamp tick (coarse kernel clocks; 1 s on some filesystems) and, with a reused inode number and
#: equal size, look unchanged. Such a "racy" read (git's term) is never trusted: the next recall
#: reads the file again, until it has aged past this window.
RACY_NS: Final = 2_000_000_000

_StatKey = tuple[int, int, int, int, int]
_Path = tuple[str, ...]


@functools.lru_cache(maxsize=1 << 16)
def _is_document(label: str) -> bool:
    """Whether ``label`` names a document (P4). Every recall asks it of every file of the searched
    folders, so the answers are kept: parsing a daily label costs some 5 us, a folder of years of
    daily notes thousands of them per recall."""
    try:
        parse_label(label)
    except InvalidRequest:
        return False
    return True


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)


def _expired(handle: fs.DirHandle, name: str, now: dt.datetime) -> bool:
    """Whether document ``name`` has expired at ``now``: a ``stat`` when it has no expiry sidecar."""
    return fs.lstat(handle, meta_name(name)) is not None and read_meta(handle, name).expired(now)


class IndexCache:
    """Indexed documents keyed by path, valid while (size, mtime_ns, inode, dev, ctime_ns) match.

    Bounded by the total size of the cached bodies (least recently used out). An entry read while
    the file was still "racy" (see :data:`RACY_NS`) is not served on its key alone: the file is
    read again, and the entry is reused only when the bytes are the same (:meth:`same`), as is
    an entry whose key changed while its bytes did not (a touch, a rewrite with the same text).
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._used = 0
        self._lock = threading.Lock()
        #: path -> (key, document, trusted: read after the racy window)
        self._entries: OrderedDict[_Path, tuple[_StatKey, LazyDocument, bool]] = OrderedDict()
        after_fork_in_child(self, IndexCache._forked)

    def _forked(self) -> None:
        self._lock = threading.Lock()  # in a forked child (P35): not one a lost thread holds
        for _, doc, _ in self._entries.values():
            doc.forked()  # and each cached document's: a thread the child lost may have been filling it

    def get(self, path: _Path, key: _StatKey) -> LazyDocument | None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or entry[0] != key or not entry[2]:
                return None
            self._entries.move_to_end(path)
            return entry[1]

    def same(self, path: _Path, digest: str) -> LazyDocument | None:
        """The cached document of ``path`` if its body's sha256 is ``digest`` (the file was read again)."""
        with self._lock:
            entry = self._entries.get(path)
            return entry[1] if entry is not None and entry[1].digest == digest else None

    def put(self, path: _Path, key: _StatKey, doc: LazyDocument, *, read_at_ns: int) -> None:
        size = key[0]
        if size > self._budget:
            return
        trusted = read_at_ns - max(key[1], key[4]) >= RACY_NS
        with self._lock:
            old = self._entries.pop(path, None)
            if old is not None:
                self._used -= old[0][0]
            self._entries[path] = (key, doc, trusted)
            self._used += size
            while self._used > self._budget and self._entries:
                _, (old_key, _, _) = self._entries.popitem(last=False)
                self._used -= old_key[0]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0

    def drop(self, path: _Path) -> None:
        with self._lock:
            old = self._entries.pop(path, None)
            if old is not None:
                self._used -= old[0][0]


class DocumentIndex:
    """The indexed documents of the partitions below ``root``, read through an :class:`IndexCache`.

    A document that cannot be used (a symlink, not a regular file, not UTF-8, unreadable) is
    skipped with a warning naming it; an error on the partition's folders themselves is raised
    (``OSError`` included: the provider's caller translates it).
    """

    def __init__(self, root: Path, cache_bytes: int) -> None:
        self.root = root
        self._cache = IndexCache(cache_bytes)

    def clear(self) -> None:
        """Forget every cached document."""
        self._cache.clear()

    def drop(self, parts: _Path, name: str) -> None:
        """Forget the cached copy of ``parts/name`` (it was removed)."""
        self._cache.drop((*parts, name))

    def documents(
        self, partition: Partition, tiers: tuple[Tier, ...], *, now: dt.datetime | None = None
    ) -> Iterator[LazyDocument]:
        """The partition's documents of ``tiers``, fixed files first in the order of ``tiers``.

        :param now: leave out the documents expired at this time (P41); ``None``: every document.
        """
        parts = partition_parts(partition)
        with fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return
            for tier in tiers:
                sub = SUBFOLDERS.get(tier)
                if sub is None:
                    name = FIXED_FILES[tier]
                    if now is not None and _expired(handle, name, now):
                        continue
                    doc = self._indexed(handle, parts, name, partition, name)
                    if doc is not None:
                        yield doc
                    continue
                try:
                    yield from self._subfolder_documents(parts, sub, partition, now)
                except fs.SymlinkRefused as exc:
                    log.warning("recall skipped %s: %s", sub, exc)

    def _subfolder_documents(
        self, parts: _Path, sub: str, partition: Partition, now: dt.datetime | None
    ) -> Iterator[LazyDocument]:
        with fs.open_dir(self.root, (*parts, sub), create=False) as subdir:
            if subdir is None:
                return
            with os.scandir(subdir.fd) as entries:
                every = [e.name for e in entries]
            names = sorted(name for name in every if not name.startswith("."))
            # Only documents with an expiry sidecar (seen in the same listing) cost a read for it.
            dated = {name for name in every if name.startswith(".")} if now is not None else set()
            path = (*parts, sub)
            stale: list[tuple[str, str]] = []
            for name in names:
                label = f"{sub}/{name}"
                if not _is_document(label):
                    continue  # not a document name (an editor's backup, a stray file)
                if now is not None and meta_name(name) in dated and read_meta(subdir, name).expired(now):
                    continue  # expired: absent from that moment (P41)
                doc, fresh = self._cached(subdir, path, name, partition, label)
                if doc is not None:
                    yield doc
                elif not fresh:
                    fs.prefetch(subdir, name)  # start the disk on every file before reading any
                    stale.append((name, label))
            for name, label in stale:
                loaded = self._load(subdir, path, name, partition, label)
                if loaded is not None:
                    yield loaded

    def _indexed(
        self, handle: fs.DirHandle, parts: _Path, name: str, partition: Partition, label: str
    ) -> LazyDocument | None:
        """The indexed document, from the cache while the file is unchanged; ``None`` to skip it."""
        doc, fresh = self._cached(handle, parts, name, partition, label)
        if doc is not None or fresh:
            return doc
        return self._load(handle, parts, name, partition, label)

    def _cached(
        self, handle: fs.DirHandle, parts: _Path, name: str, partition: Partition, label: str
    ) -> tuple[LazyDocument | None, bool]:
        """``(doc, True)`` from the cache, ``(None, True)`` to skip, ``(None, False)`` to (re)load."""
        st = fs.lstat(handle, name)
        if st is None:
            return None, True
        if not stat.S_ISREG(st.st_mode):
            log.warning("recall skipped %s: it is a symlink or not a regular file", describe(partition, label))
            return None, True
        cached = self._cache.get((*parts, name), _stat_key(st))
        return cached, cached is not None

    def _load(
        self, handle: fs.DirHandle, parts: _Path, name: str, partition: Partition, label: str
    ) -> LazyDocument | None:
        read_at_ns = time.time_ns()
        try:
            found = fs.read_file(handle, name)
        except UpstreamError as exc:
            log.warning("recall skipped %s: %s", describe(partition, label), exc)
            return None
        if found is None:
            return None
        data, opened = found
        path = (*parts, name)
        digest = hashlib.sha256(data).hexdigest()
        # The same bytes as the cached copy (a racy read confirmed, a touch): its index, postings
        # and word list serve on, instead of indexing the document again on every recall.
        doc = self._cache.same(path, digest)
        if doc is None:
            try:
                body = decode(data, partition, label, self.root)
            except UpstreamError as exc:
                log.warning("recall skipped %s", exc)
                return None
            doc = LazyDocument(label, body, digest=digest)
        self._cache.put(path, _stat_key(opened), doc, read_at_ns=read_at_ns)
        return doc
