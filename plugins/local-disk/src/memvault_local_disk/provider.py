"""The ``local-disk`` provider: markdown files under a root directory.

Layout (everything a person needs to read or edit with any editor)::

    <root>/<workspace>/agents/<agent>/AGENT.md, PERSONA.md, pins.md, lessons.md
    <root>/<workspace>/agents/<agent>/daily/<YYYY-MM-DD>.md
    <root>/<workspace>/agents/<agent>/peers/<slug>.md
    <root>/<workspace>/crews/<crew>/CREW.md
    <root>/<workspace>/.quarantine/<sha256>.md        (mode 0600, never recalled)

Dot-prefixed files beside a document are the provider's own: ``.<name>.lock``
(the lock sentinel), ``.<name>.subject`` (the data subjects that wrote to the
document, one per line: contract P13) and
``.<name>.tmp-*`` (a write in flight). Recall and read only ever open exact
document names, so none of them is visible through the verbs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs

from memvault import search as text
from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError
from memvault.contract.models import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Partition,
    QuarantineRecord,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RetainRequest,
    RetainResult,
    Tier,
    check_cap,
    parse_label,
    validate_identifier,
)
from memvault.hooks.markers import hookimpl
from memvault_local_disk import fs
from memvault_local_disk.lazy import LazyDocument

__all__ = ["LocalDiskProvider"]

log = logging.getLogger("memvault_local_disk")

NAME: Final = "local-disk"
_FIXED_FILES: Final = {
    Tier.AGENT: "AGENT.md",
    Tier.PERSONA: "PERSONA.md",
    Tier.PINS: "pins.md",
    Tier.LESSONS: "lessons.md",
    Tier.CREW: "CREW.md",
}
_SUBDIR_TIERS: Final = {Tier.DAILY: "daily", Tier.PEERS: "peers"}
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_QUARANTINE_DIR: Final = ".quarantine"
_PROBE_PREFIX: Final = ".health-probe-"
DEFAULT_CACHE_BYTES: Final = 64 * 1024 * 1024  # of text; the lazy index takes about 3-4x that in RAM


def _subject_name(name: str) -> str:
    return f".{name}.subject"


def _parse_subjects(data: bytes) -> set[str]:
    """The subjects of a tag file: one per line (a 0.1 file holds one id without a newline)."""
    return {line.strip() for line in data.decode("ascii", "replace").splitlines() if line.strip()}


def _read_subjects(handle: fs.DirHandle, name: str) -> set[str]:
    found = fs.read_file(handle, _subject_name(name))
    return _parse_subjects(found[0]) if found is not None else set()


def _encode_subjects(subjects: set[str]) -> bytes:
    return "".join(f"{s}\n" for s in sorted(subjects)).encode("ascii")


def _partition_parts(partition: Partition) -> tuple[str, ...]:
    folder = "agents" if partition.kind == "agent" else "crews"
    return (partition.workspace_id, folder, partition.owner_id)


def _location(partition: Partition, tier: Tier, key: str) -> tuple[tuple[str, ...], str]:
    """The folder components below the root and the file name of one document."""
    parts = _partition_parts(partition)
    sub = _SUBDIR_TIERS.get(tier)
    if sub is not None:
        return (*parts, sub), fs.safe_component(f"{key}.md")
    return parts, _FIXED_FILES[tier]


def _describe(partition: Partition, label: str) -> str:
    return f"{label} of {partition.kind} {partition.owner_id!r} in workspace {partition.workspace_id!r}"


_StatKey = tuple[int, int, int, int, int]


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)


#: A file whose change time is this close to "now" when it is read may change again within the same
#: timestamp tick (coarse kernel clocks; 1 s on some filesystems) and, with a reused inode number and
#: equal size, look unchanged. Such a "racy" read (git's term) is never trusted: the next recall
#: reads the file again, until it has aged past this window.
RACY_NS: Final = 2_000_000_000


class _IndexCache:
    """Indexed documents keyed by path, valid while (size, mtime_ns, inode, dev, ctime_ns) match.

    Bounded by the total size of the cached bodies (least recently used out). An entry read while
    the file was still "racy" (see :data:`RACY_NS`) is not served again.
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._used = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, ...], tuple[_StatKey, LazyDocument]] = OrderedDict()

    def get(self, path: tuple[str, ...], key: _StatKey) -> LazyDocument | None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or entry[0] != key:
                return None
            self._entries.move_to_end(path)
            return entry[1]

    def put(self, path: tuple[str, ...], key: _StatKey, doc: LazyDocument, *, read_at_ns: int) -> None:
        size = key[0]
        if size > self._budget or read_at_ns - max(key[1], key[4]) < RACY_NS:
            return
        with self._lock:
            old = self._entries.pop(path, None)
            if old is not None:
                self._used -= old[0][0]
            self._entries[path] = (key, doc)
            self._used += size
            while self._used > self._budget and self._entries:
                _, (old_key, _) = self._entries.popitem(last=False)
                self._used -= old_key[0]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0

    def drop(self, path: tuple[str, ...]) -> None:
        with self._lock:
            old = self._entries.pop(path, None)
            if old is not None:
                self._used -= old[0][0]


class LocalDiskProvider:
    """Documents as markdown files under ``root``; see the module docstring for the layout.

    :param root: the memory root folder; created (mode 0700) on the first write.
    :param cache_bytes: how many bytes of document text recall keeps indexed in memory.
    """

    capabilities: Final = frozenset(
        {
            Capability.MULTI_PROCESS,
            Capability.DURABLE,
            Capability.QUARANTINE,
            Capability.CASCADE_FORGET,
            Capability.LIST_DOCUMENTS,
        }
    )

    def __init__(self, root: Path | str, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if not isinstance(root, (str, Path)) or not str(root).strip():
            raise InvalidRequest("root is required: set it to the folder that holds the memory files", field="root")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise InvalidRequest("cache_bytes must be a non-negative integer", field="cache_bytes")
        self.root = Path(root).expanduser().absolute()
        self._cache = _IndexCache(cache_bytes)

    def __repr__(self) -> str:
        return f"<LocalDiskProvider root={str(self.root)!r}>"

    def close(self) -> None:
        """Drop the in-memory index cache (the files need no closing)."""
        self._cache.clear()

    # -- errors ---------------------------------------------------------------

    @contextlib.contextmanager
    def _storage(self, doing: str) -> Iterator[None]:
        """Turn raw ``OSError`` into ``UpstreamError`` saying what failed and where."""
        try:
            yield
        except MemvaultError:
            raise
        except OSError as exc:
            raise UpstreamError(
                f"local-disk could not {doing} under root {str(self.root)!r}: {exc.strerror or exc}. "
                "Check that the folder exists, is writable by this user and the disk is not full"
            ) from exc

    def _decode(self, data: bytes, partition: Partition, label: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UpstreamError(
                f"{_describe(partition, label)} is not valid UTF-8 on disk (byte {exc.start}); "
                "re-save the file as UTF-8, or replace it with a retain in mode 'replace'"
            ) from exc

    # -- verbs ----------------------------------------------------------------

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        label = ref.label
        parts, name = _location(ref.partition, ref.tier, ref.key)
        with self._storage(f"write {label}"), fs.open_dir(self.root, parts, create=True) as handle:
            assert handle is not None
            with fs.document_lock(handle, name):
                fs.sweep_temporaries(handle, name)
                current = fs.lstat(handle, name)
                if current is not None and stat.S_ISLNK(current.st_mode):
                    raise fs.SymlinkRefused(
                        f"{_describe(ref.partition, label)} is a symlink; local-disk never follows symlinks. "
                        "Replace it with a regular file"
                    )
                if current is not None and not stat.S_ISREG(current.st_mode):
                    raise UpstreamError(
                        f"{_describe(ref.partition, label)} is not a regular file on disk: move it away"
                    )
                old = b""
                old_mode = fs.FILE_MODE
                current_size = 0
                if current is not None:
                    old_mode = stat.S_IMODE(current.st_mode)
                    current_size = current.st_size
                    if request.mode == "append":
                        found = fs.read_file(handle, name)
                        old = found[0] if found else b""
                        current_size = len(old)
                        self._decode(old, ref.partition, label)  # refuse to extend a corrupt file
                added = request.content.encode("utf-8")
                body = old + added if request.mode == "append" else added
                warning = check_cap(request.tier, current=current_size, projected=len(body))
                subject_file = _subject_name(name)
                # A new document starts with no tags: a tag file without its document is stale
                # (the document was deleted by hand, or a crash came between the two writes).
                tags = _read_subjects(handle, name) if current is not None else set()
                if request.data_subject_id and request.data_subject_id not in tags:
                    # Every subject that ever wrote stays (P13). Tag first: a crash between the
                    # two writes over-tags, never under-tags.
                    fs.write_atomic(handle, subject_file, _encode_subjects(tags | {request.data_subject_id}))
                elif current is None and not request.data_subject_id:
                    fs.remove_file(handle, subject_file)
                fs.write_atomic(handle, name, body, mode=old_mode)
        return RetainResult(id=label, bytes=len(body), warning=warning)

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref
        label = ref.label
        parts, name = _location(ref.partition, ref.tier, ref.key)
        with self._storage(f"read {label}"), fs.open_dir(self.root, parts, create=False) as handle:
            found = fs.read_file(handle, name) if handle is not None else None
        if found is None:
            return ReadResult(id=label, content="")
        return ReadResult(id=label, content=self._decode(found[0], ref.partition, label))

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        documents: list[LazyDocument] = []
        with self._storage("search the memory files"):
            for partition, tiers in request.scopes():
                documents.extend(self._partition_documents(partition, tiers))
        digests = {doc.source: doc.digest for doc in documents}
        hits = text.search(query, documents, request.limit)
        return RecallResult(hits=[attrs.evolve(hit, digest=digests[hit.source]) for hit in hits])

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.data_subject_id:
            with self._storage(f"erase data subject {request.data_subject_id!r}"):
                return ForgetResult(removed=self._forget_subject(request.workspace_id, request.data_subject_id))
        ref = request.ref
        parts, name = _location(ref.partition, ref.tier, ref.key)
        with self._storage(f"remove {ref.label}"), fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return ForgetResult(removed=0)
            removed = self._remove_document(handle, name, expected_subject=None)
        self._cache.drop((*parts, name))
        return ForgetResult(removed=1 if removed else 0)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        root = str(self.root)
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            return HealthStatus(
                ok=False,
                message=f"memory root {root!r} does not exist: create it (local-disk also creates it "
                "on the first write) or fix the root setting",
            )
        except OSError as exc:
            return HealthStatus(ok=False, message=f"memory root {root!r} cannot be inspected: {exc.strerror or exc}")
        if not stat.S_ISDIR(st.st_mode):
            return HealthStatus(ok=False, message=f"memory root {root!r} is not a directory: point root at a folder")
        probe = f"{_PROBE_PREFIX}{os.getpid()}-{threading.get_ident()}"
        try:
            fd = os.open(self.root / probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, b"ok")
            finally:
                os.close(fd)
                os.unlink(self.root / probe)
        except OSError as exc:
            return HealthStatus(
                ok=False,
                message=f"memory root {root!r} is not writable: {exc.strerror or exc}; fix its permissions "
                "or free disk space",
            )
        return HealthStatus(ok=True)

    @hookimpl
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        documents: list[DocumentInfo] = []
        with self._storage("list the memory files"):
            if request.workspace_id:
                workspaces = [request.workspace_id]
            else:
                with fs.open_dir(self.root, (), create=False) as root:
                    workspaces = _folders(root)
            for workspace in workspaces:
                for kind, folder in (("agent", "agents"), ("crew", "crews")):
                    with fs.open_dir(self.root, (workspace, folder), create=False) as owners:
                        names = _folders(owners)
                    for owner in names:
                        partition = Partition(workspace_id=workspace, kind=kind, owner_id=owner)
                        documents.extend(self._list_partition(partition, request))
        return ListDocumentsResult(documents=documents)

    def _list_partition(self, partition: Partition, request: ListDocumentsRequest) -> Iterator[DocumentInfo]:
        agent_id = partition.owner_id if partition.kind == "agent" else ""
        crew_id = partition.owner_id if partition.kind == "crew" else ""
        tiers = [Tier.CREW] if partition.kind == "crew" else [t for t in Tier if t.is_agent_tier]
        tiers = [t for t in tiers if request.includes(
            workspace_id=partition.workspace_id, agent_id=agent_id, crew_id=crew_id, tier=t
        )]  # fmt: skip
        parts = _partition_parts(partition)
        for tier in tiers:
            sub = _SUBDIR_TIERS.get(tier)
            folder = parts if sub is None else (*parts, sub)
            with fs.open_dir(self.root, folder, create=False) as handle:
                if handle is None:
                    continue
                if sub is None:
                    names = [_FIXED_FILES[tier]]
                else:
                    with os.scandir(handle.fd) as entries:
                        names = sorted(e.name for e in entries if not e.name.startswith("."))
                for name in names:
                    label = name if sub is None else f"{sub}/{name}"
                    if sub is not None:
                        try:
                            parse_label(label)
                        except InvalidRequest:
                            continue  # not a document name (an editor's backup, a stray file)
                    st = fs.lstat(handle, name)
                    if st is None:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        log.warning("listing skipped %s: it is a symlink or not a regular file", label)
                        continue
                    found = fs.read_file(handle, name)
                    if found is None:
                        continue  # removed meanwhile
                    data, opened = found
                    yield DocumentInfo(
                        workspace_id=partition.workspace_id,
                        agent_id=agent_id,
                        crew_id=crew_id,
                        tier=tier,
                        label=label,
                        bytes=len(data),
                        subjects=_subjects(handle, name),
                        digest=hashlib.sha256(data).hexdigest(),
                        updated_at=dt.datetime.fromtimestamp(opened.st_mtime, dt.timezone.utc),
                    )

    # -- quarantine -----------------------------------------------------------

    @hookimpl
    def memvault_quarantine_keep(self, record: QuarantineRecord) -> bool:
        workspace = validate_identifier(record.workspace_id, "workspace_id")
        sha = self._check_sha(record.sha256)
        front = {
            "created_at": record.created_at.astimezone(dt.timezone.utc).isoformat(),
            "workspace_id": workspace,
            "agent_id": record.agent_id,
            "crew_id": record.crew_id,
            "label": record.label,
            "category": record.category,
            "pattern": record.pattern,
            "sha256": sha,
            "data_subject_id": record.data_subject_id,
        }
        header = "".join(f"{k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in front.items())
        data = f"---\n{header}---\n{record.content}".encode()
        name = f"{sha}.md"
        with self._storage("keep a quarantine copy"), _Quarantine(self.root, workspace).handle(create=True) as handle:
            assert handle is not None
            with fs.document_lock(handle, name):
                if fs.lstat(handle, name) is None:  # the first copy of a body is kept, like the memory provider
                    fs.write_atomic(handle, name, data, mode=0o600)
                elif record.data_subject_id:
                    self._add_quarantine_subject(handle, name, record.data_subject_id)
        return True

    def _add_quarantine_subject(self, handle: fs.DirHandle, name: str, subject: str) -> None:
        """The kept copy is also the copy of this subject's write: erasing either subject removes it (P24)."""
        found = fs.read_file(handle, name)
        if found is None:
            return
        raw = found[0].decode("utf-8", errors="surrogateescape")
        header, sep, content = raw[4:].partition("---\n")
        if not raw.startswith("---\n") or not sep:
            return
        lines = header.splitlines()
        subjects = _quarantine_subjects(lines)
        if subject in subjects:
            return
        subjects.add(subject)
        kept = [line for line in lines if not line.startswith("data_subject_ids: ")]
        kept.append(f"data_subject_ids: {json.dumps(sorted(subjects))}")
        data = ("---\n" + "".join(f"{line}\n" for line in kept) + "---\n" + content).encode("utf-8", "surrogateescape")
        fs.write_atomic(handle, name, data, mode=0o600)

    @hookimpl
    def memvault_quarantine_list(self, workspace_id: str) -> list[QuarantineRecord]:
        workspace = validate_identifier(workspace_id, "workspace_id")
        records: list[QuarantineRecord] = []
        with self._storage("list quarantine copies"), _Quarantine(self.root, workspace).handle(create=False) as handle:
            if handle is None:
                return []
            with os.scandir(handle.fd) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".md") and _SHA256.fullmatch(e.name[:-3]))
            for name in names:
                record = self._load_quarantine(handle, name)
                if record is not None:
                    records.append(record)
        records.sort(key=lambda r: r.created_at)
        return records

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        workspace = validate_identifier(workspace_id, "workspace_id")
        sha = self._check_sha(sha256)
        with self._storage("read a quarantine copy"), _Quarantine(self.root, workspace).handle(create=False) as handle:
            if handle is None:
                return None
            return self._load_quarantine(handle, f"{sha}.md")

    @staticmethod
    def _check_sha(value: object) -> str:
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise InvalidRequest(f"sha256 {str(value)[:80]!r} is not 64 lowercase hex digits", field="sha256")
        return value

    def _load_quarantine(self, handle: fs.DirHandle, name: str) -> QuarantineRecord | None:
        found = fs.read_file(handle, name)
        if found is None:
            return None
        raw = found[0].decode("utf-8", errors="replace")
        if not raw.startswith("---\n"):
            raise UpstreamError(f"quarantine copy {name!r} has no frontmatter: it was edited by hand")
        header, sep, content = raw[4:].partition("---\n")
        if not sep:
            raise UpstreamError(f"quarantine copy {name!r} has an unterminated frontmatter")
        fields: dict[str, Any] = {}
        for line in header.splitlines():
            key, _, value = line.partition(": ")
            try:
                fields[key] = json.loads(value)
            except ValueError as exc:
                raise UpstreamError(f"quarantine copy {name!r} has a malformed frontmatter line {line[:80]!r}") from exc
        try:
            return QuarantineRecord(
                workspace_id=str(fields["workspace_id"]),
                agent_id=str(fields.get("agent_id", "")),
                crew_id=str(fields.get("crew_id", "")),
                label=str(fields["label"]),
                category=str(fields["category"]),
                pattern=str(fields["pattern"]),
                sha256=str(fields["sha256"]),
                content=content,
                created_at=dt.datetime.fromisoformat(str(fields["created_at"])),
                data_subject_id=str(fields.get("data_subject_id", "")),
            )
        except (KeyError, ValueError) as exc:
            raise UpstreamError(f"quarantine copy {name!r} lacks a frontmatter field: {exc}") from exc

    # -- internals ------------------------------------------------------------

    def _partition_documents(self, partition: Partition, tiers: tuple[Tier, ...]) -> Iterator[LazyDocument]:
        parts = _partition_parts(partition)
        with fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return
            for tier in tiers:
                sub = _SUBDIR_TIERS.get(tier)
                if sub is None:
                    doc = self._indexed(handle, parts, _FIXED_FILES[tier], partition, _FIXED_FILES[tier])
                    if doc is not None:
                        yield doc
                    continue
                try:
                    yield from self._subdir_documents(parts, sub, partition)
                except fs.SymlinkRefused as exc:
                    log.warning("recall skipped %s: %s", sub, exc)

    def _subdir_documents(self, parts: tuple[str, ...], sub: str, partition: Partition) -> Iterator[LazyDocument]:
        with fs.open_dir(self.root, (*parts, sub), create=False) as subdir:
            if subdir is None:
                return
            with os.scandir(subdir.fd) as entries:
                names = sorted(e.name for e in entries if not e.name.startswith("."))
            path = (*parts, sub)
            stale: list[tuple[str, str]] = []
            for name in names:
                label = f"{sub}/{name}"
                try:
                    parse_label(label)
                except InvalidRequest:
                    continue  # not a document name (an editor's backup, a stray file)
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
        self, handle: fs.DirHandle, parts: tuple[str, ...], name: str, partition: Partition, label: str
    ) -> LazyDocument | None:
        """The indexed document, from the cache while the file is unchanged; ``None`` to skip it."""
        doc, fresh = self._cached(handle, parts, name, partition, label)
        if doc is not None or fresh:
            return doc
        return self._load(handle, parts, name, partition, label)

    def _cached(
        self, handle: fs.DirHandle, parts: tuple[str, ...], name: str, partition: Partition, label: str
    ) -> tuple[LazyDocument | None, bool]:
        """``(doc, True)`` from the cache, ``(None, True)`` to skip, ``(None, False)`` to (re)load."""
        st = fs.lstat(handle, name)
        if st is None:
            return None, True
        if not stat.S_ISREG(st.st_mode):
            log.warning("recall skipped %s: it is a symlink or not a regular file", _describe(partition, label))
            return None, True
        cached = self._cache.get((*parts, name), _stat_key(st))
        return cached, cached is not None

    def _load(
        self, handle: fs.DirHandle, parts: tuple[str, ...], name: str, partition: Partition, label: str
    ) -> LazyDocument | None:
        read_at_ns = time.time_ns()
        try:
            found = fs.read_file(handle, name)
        except UpstreamError as exc:
            log.warning("recall skipped %s: %s", _describe(partition, label), exc)
            return None
        if found is None:
            return None
        data, opened = found
        try:
            body = self._decode(data, partition, label)
        except UpstreamError as exc:
            log.warning("recall skipped %s", exc)
            return None
        doc = LazyDocument(label, body)
        self._cache.put((*parts, name), _stat_key(opened), doc, read_at_ns=read_at_ns)
        return doc

    def _remove_document(self, handle: fs.DirHandle, name: str, *, expected_subject: str | None) -> bool:
        """Unlink a document, its subject tag and its lock sentinel (under the lock).

        With ``expected_subject`` set, only when the tag still names that subject.
        """
        with fs.document_lock(handle, name):
            current = fs.lstat(handle, name)
            if current is not None and stat.S_ISLNK(current.st_mode):
                raise fs.SymlinkRefused(
                    f"{handle.relpath}/{name} is a symlink; local-disk never follows or removes symlinks. "
                    "Remove it by hand"
                )
            if expected_subject is not None and expected_subject not in _read_subjects(handle, name):
                return False
            removed = fs.remove_file(handle, name)
            fs.remove_file(handle, _subject_name(name))
            fs.sweep_temporaries(handle, name)
            fs.remove_file(handle, fs.lock_name(name))
            os.fsync(handle.fd)
        return removed

    def _forget_subject(self, workspace: str, subject: str) -> int:
        removed = 0
        with fs.open_dir(self.root, (workspace,), create=False) as ws:
            if ws is None:
                return 0
        self._forget_subject_quarantine(workspace, subject)
        for kind in ("agents", "crews"):
            with fs.open_dir(self.root, (workspace, kind), create=False) as owners_dir:
                if owners_dir is None:
                    continue
                with os.scandir(owners_dir.fd) as entries:
                    owners = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
            for owner in owners:
                if owner.startswith("."):
                    continue
                base = (workspace, kind, owner)
                for parts in (base, (*base, "daily"), (*base, "peers")):
                    removed += self._forget_subject_in(parts, subject)
        return removed

    def _forget_subject_quarantine(self, workspace: str, subject: str) -> None:
        """Quarantine copies of the subject's rejected writes are derived data: erase them too (P24)."""
        with _Quarantine(self.root, workspace).handle(create=False) as handle:
            if handle is None:
                return
            with os.scandir(handle.fd) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".md") and _SHA256.fullmatch(e.name[:-3]))
            for name in names:
                with fs.document_lock(handle, name):
                    found = fs.read_file(handle, name)
                    if found is None:
                        continue
                    header = found[0].decode("utf-8", errors="replace")[4:].partition("---\n")[0]
                    if subject not in _quarantine_subjects(header.splitlines()):
                        continue
                    fs.remove_file(handle, name)
                    fs.sweep_temporaries(handle, name)
                    fs.remove_file(handle, fs.lock_name(name))
                    os.fsync(handle.fd)

    def _forget_subject_in(self, parts: tuple[str, ...], subject: str) -> int:
        removed = 0
        with fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return 0
            with os.scandir(handle.fd) as entries:
                tags = sorted(e.name for e in entries if e.name.startswith(".") and e.name.endswith(".md.subject"))
            for tag in tags:
                name = tag[1 : -len(".subject")]
                found = fs.read_file(handle, tag)
                if found is None or subject not in _parse_subjects(found[0]):  # exact match (P13)
                    continue
                if self._remove_document(handle, name, expected_subject=subject):
                    removed += 1
                self._cache.drop((*parts, name))
        return removed


def _folders(handle: fs.DirHandle | None) -> list[str]:
    """The sub-folders of ``handle`` named like identifiers (P3); provider files and dot folders are not."""
    if handle is None:
        return []
    with os.scandir(handle.fd) as entries:
        names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    out = []
    for name in names:
        try:
            out.append(validate_identifier(name, "folder"))
        except InvalidRequest:
            continue
    return out


def _subjects(handle: fs.DirHandle, name: str) -> tuple[str, ...]:
    """The data subjects a document carries (P13): its ``.<name>.subject`` tag file, one subject a line."""
    return tuple(sorted(_read_subjects(handle, name)))


def _quarantine_subjects(header_lines: list[str]) -> set[str]:
    """Every subject whose rejected write this copy holds (exact strings)."""
    subjects: set[str] = set()
    for line in header_lines:
        key, _, value = line.partition(": ")
        try:
            if key == "data_subject_id":
                subjects.add(str(json.loads(value)))
            elif key == "data_subject_ids":
                subjects.update(str(v) for v in json.loads(value))
        except (ValueError, TypeError):
            continue
    subjects.discard("")
    return subjects


class _Quarantine:
    """The workspace's ``.quarantine`` folder (a fixed, provider-owned dot name)."""

    def __init__(self, root: Path, workspace: str) -> None:
        self.root = root
        self.workspace = workspace

    @contextlib.contextmanager
    def handle(self, *, create: bool) -> Iterator[fs.DirHandle | None]:
        with fs.open_dir(self.root, (self.workspace,), create=create) as ws:
            if ws is None:
                yield None
                return
            if create:
                try:
                    os.mkdir(_QUARANTINE_DIR, 0o700, dir_fd=ws.fd)
                except FileExistsError:
                    pass
                else:
                    os.fsync(ws.fd)
            try:
                fd = os.open(_QUARANTINE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ws.fd)
            except FileNotFoundError:
                yield None
                return
            try:
                yield fs.DirHandle(fd, f"{self.workspace}/{_QUARANTINE_DIR}")
            finally:
                os.close(fd)
