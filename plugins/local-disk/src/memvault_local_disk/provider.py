"""The ``local-disk`` provider: markdown files under a root directory.

Layout (everything a person needs to read or edit with any editor)::

    <root>/<workspace>/agents/<agent>/AGENT.md, PERSONA.md, pins.md, lessons.md
    <root>/<workspace>/agents/<agent>/daily/<YYYY-MM-DD>.md
    <root>/<workspace>/agents/<agent>/peers/<slug>.md
    <root>/<workspace>/crews/<crew>/CREW.md
    <root>/<workspace>/.quarantine/<sha256>.md        (mode 0600, never recalled)

Dot-prefixed files beside a document are the provider's own: ``.<name>.lock``
(the lock sentinel), ``.<name>.subject`` (the data subjects that wrote to the
document, one per line: contract P13), ``.<name>.vectors`` (the vectors of its
lines, for recall by meaning: :mod:`memvault_local_disk.vectors`), ``.<name>.meta``
(when it expires: :mod:`memvault_local_disk.expiry`), ``.<name>.pending`` (a write
with an idempotency key in flight: :mod:`memvault_local_disk.idempotency`) and
``.<name>.tmp-*`` (a write in flight). Idempotency keys live in
``<root>/<workspace>/.idempotency/``. Recall and read only ever open exact
document names, so none of them is visible through the verbs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import logging
import os
import stat
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Final

import attrs

from memvault import check_stored
from memvault import search as text
from memvault.contract import clock
from memvault.contract.embedding import PendingLine, QueryVector
from memvault.contract.errors import (
    IdempotencyConflict,
    InvalidRequest,
    MemvaultError,
    SkippedUnreadable,
    UpstreamError,
)
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
    effective_expiry,
    parse_label,
    validate_identifier,
)
from memvault.contract.retention import SweepRequest, SweepResult
from memvault.contract.scanning import nothing_written
from memvault.hooks.markers import hookimpl
from memvault_local_disk import fs
from memvault_local_disk.expiry import META_SUFFIX, NONE, Meta, earliest, meta_name, read_meta, write_meta
from memvault_local_disk.idempotency import KeyFolder, Record, pending_name, settle, write_pending
from memvault_local_disk.index import DEFAULT_CACHE_BYTES, DocumentIndex
from memvault_local_disk.layout import FIXED_FILES, SUBFOLDERS, decode, describe, location, partition_parts
from memvault_local_disk.lazy import LazyDocument
from memvault_local_disk.quarantine import QuarantineFolder
from memvault_local_disk.vectors import SUFFIX, VectorFiles, keep_current_entries, remove_orphans, sidecar_name

__all__ = ["LocalDiskProvider"]

log = logging.getLogger("memvault_local_disk")

NAME: Final = "local-disk"
_PROBE_PREFIX: Final = ".health-probe-"


def _subject_name(name: str) -> str:
    return f".{name}.subject"


def _guarding(target: str) -> str:
    """The document whose lock guards writes of ``target``: a tag file's document, else ``target``."""
    if target.startswith(".") and target.endswith(".subject"):
        return target[1 : -len(".subject")]
    for suffix in (SUFFIX, META_SUFFIX, ".pending"):  # a sidecar of vectors, of expiry, a journal entry
        if target.startswith(".") and target.endswith(suffix):
            return target[1 : -len(suffix)]
    return target


def _sweep(handle: fs.DirHandle, name: str) -> None:
    """Remove what a crashed writer of document ``name`` left: its, its tag file's and its sidecar's
    temporaries (caller holds the document's lock). A tag file's temporary holds data subject ids."""
    fs.sweep_temporaries(handle, name)
    fs.sweep_temporaries(handle, _subject_name(name))
    fs.sweep_temporaries(handle, sidecar_name(name))
    fs.sweep_temporaries(handle, meta_name(name))
    fs.sweep_temporaries(handle, pending_name(name))


def _parse_subjects(data: bytes) -> set[str]:
    """The subjects of a tag file: one per line (a 0.1 file holds one id without a newline)."""
    return {line.strip() for line in data.decode("ascii", "replace").splitlines() if line.strip()}


def _read_subjects(handle: fs.DirHandle, name: str) -> set[str]:
    found = fs.read_file(handle, _subject_name(name))
    return _parse_subjects(found[0]) if found is not None else set()


def _encode_subjects(subjects: set[str]) -> bytes:
    return "".join(f"{s}\n" for s in sorted(subjects)).encode("ascii")


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
            Capability.CHECKS_STORED,
            Capability.VECTORS,
            Capability.EXPIRY,
            Capability.IDEMPOTENT_WRITES,
        }
    )

    def __init__(self, root: Path | str, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if not isinstance(root, (str, Path)) or not str(root).strip():
            raise InvalidRequest("root is required: set it to the folder that holds the memory files", field="root")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise InvalidRequest("cache_bytes must be a non-negative integer", field="cache_bytes")
        if "\x00" in str(root):
            raise InvalidRequest("root holds a NUL character: no folder can have that name", field="root")
        try:
            self.root = Path(root).expanduser().absolute()
        except RuntimeError as exc:  # "~" without a home directory
            raise InvalidRequest(
                f"root {str(root)!r} cannot be expanded: {exc}; give a full path", field="root"
            ) from exc
        except OSError as exc:  # a relative root while the working directory is gone
            raise UpstreamError(
                f"root {str(root)!r} is relative and the working directory cannot be found "
                f"({exc.strerror or exc}): give a full path"
            ) from exc
        self._index = DocumentIndex(self.root, cache_bytes)
        self._vectors = VectorFiles(self.root)

    def _quarantine(self, workspace_id: str) -> QuarantineFolder:
        return QuarantineFolder(self.root, validate_identifier(workspace_id, "workspace_id"))

    def __repr__(self) -> str:
        return f"<LocalDiskProvider root={str(self.root)!r}>"

    def close(self) -> None:
        """Drop the in-memory index cache (the files need no closing); it touches no file."""
        self._index.clear()
        self._vectors.clear()

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

    # -- verbs ----------------------------------------------------------------

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        key = request.idempotency_key
        if not key:
            with self._storage(f"write {ref.label}"):
                return self._retain(request, None)
        keys = KeyFolder(self.root, ref.partition.workspace_id)
        # The key's lock, then the document's (always in that order): two writers with one key, in
        # threads or processes, run one after the other, and the second finds the first's record.
        with self._storage(f"write {ref.label}"), keys.handle(create=True) as key_handle:
            assert key_handle is not None
            with KeyFolder.lock(key_handle, key):
                return self._retain(request, key_handle)

    def _retain(self, request: RetainRequest, key_handle: fs.DirHandle | None) -> RetainResult:
        """The write, under the document's lock; with ``key_handle`` (the key's lock held) idempotent."""
        ref = request.ref
        label = ref.label
        workspace = ref.partition.workspace_id
        parts, name = location(ref.partition, ref.tier, ref.key)
        with fs.open_dir(self.root, parts, create=True) as handle:
            assert handle is not None
            with fs.document_lock(handle, name):
                _sweep(handle, name)
                settle(handle, name, KeyFolder(self.root, workspace))  # a crashed keyed write's record
                if key_handle is not None:
                    recorded = KeyFolder.get(key_handle, request.idempotency_key)
                    if recorded is not None:
                        if recorded.fingerprint != request.fingerprint():
                            raise IdempotencyConflict(key=request.idempotency_key, workspace_id=workspace)
                        nothing_written()  # tells the scanner's check there is no body to scan (P29)
                        return recorded.result  # a repeat: nothing written, even if the document changed since
                current = fs.lstat(handle, name)
                if current is not None and stat.S_ISLNK(current.st_mode):
                    raise fs.SymlinkRefused(
                        f"{describe(ref.partition, label)} is a symlink; local-disk never follows symlinks. "
                        "Replace it with a regular file"
                    )
                if current is not None and not stat.S_ISREG(current.st_mode):
                    raise UpstreamError(f"{describe(ref.partition, label)} is not a regular file on disk: move it away")
                now = clock.now()
                meta = read_meta(handle, name) if current is not None else NONE
                # An expired document is absent (P41): a write to it starts a new one (no old text, tags
                # or vectors come back, nor count toward the cap).
                live = current is not None and not meta.expired(now)
                explicit = self._explicit_expiry(request, meta, live)
                new_meta = Meta(expires_at=explicit, purge_at=effective_expiry(explicit, now, request.retention))
                old = b""
                old_mode = fs.FILE_MODE
                current_size = 0
                stored = ""
                if current is not None:
                    old_mode = stat.S_IMODE(current.st_mode)
                if live:
                    assert current is not None
                    current_size = current.st_size
                    if request.mode == "append":
                        found = fs.read_file(handle, name)
                        old = found[0] if found else b""
                        current_size = len(old)
                        stored = decode(old, ref.partition, label, self.root)  # refuse to extend a corrupt file
                if request.mode == "append":
                    # The scanner checks the body this append extends, under the document's lock; a
                    # rejection (ContentRejected) leaves before the tag file or the document is touched.
                    check_stored(stored)
                added = request.content.encode("utf-8")
                body = old + added if request.mode == "append" else added
                warning = check_cap(request.tier, current=current_size, projected=len(body))
                result = RetainResult(id=label, bytes=len(body), warning=warning)
                record = None
                if key_handle is not None:
                    record = Record(
                        key=request.idempotency_key, fingerprint=request.fingerprint(), result=result, recorded_at=now
                    )
                    on_disk = old if live and request.mode == "append" else _body(handle, name)
                    before = hashlib.sha256(on_disk).hexdigest()
                    write_pending(handle, name, record, before=before, after=hashlib.sha256(body).hexdigest())
                # Until the document is written, it expires at the earlier of its old and new expiries:
                # a crash in between never leaves either body living longer than its write asked.
                old_purge = meta.purge_at if live else None
                interim = Meta(expires_at=new_meta.expires_at, purge_at=earliest(old_purge, new_meta.purge_at))
                if interim != (meta if current is not None else NONE):
                    write_meta(handle, name, interim)
                subject_file = _subject_name(name)
                # A new document starts with no tags: a tag file without its document is stale
                # (the document was deleted by hand, or a crash came between the two writes).
                tags = _read_subjects(handle, name) if live else set()
                if request.data_subject_id and request.data_subject_id not in tags:
                    # Every subject that ever wrote stays (P13). Tag first: a crash between the
                    # two writes over-tags, never under-tags.
                    fs.write_atomic(handle, subject_file, _encode_subjects(tags | {request.data_subject_id}))
                elif not live and not request.data_subject_id:
                    fs.remove_file(handle, subject_file)
                if not live:  # a new document starts with no vectors
                    fs.remove_file(handle, sidecar_name(name))
                elif request.mode == "replace":
                    # The vectors of the lines a replace changes go before it (derived data of text that is
                    # gone, P40); those of lines it keeps word for word stay, as in every other provider.
                    keep_current_entries(handle, name, request.content)
                fs.write_atomic(handle, name, body, mode=old_mode)
                # The file's mtime is the document's last accepted write on the memory's clock (the sweep's
                # retention cutoffs compare it: P43), as the vault's clock tells it, not the kernel's.
                stamp = int(now.timestamp() * 1_000_000_000)
                os.utime(name, ns=(stamp, stamp), dir_fd=handle.fd, follow_symlinks=False)
                if new_meta != interim:
                    write_meta(handle, name, new_meta)
                if record is not None and key_handle is not None:
                    KeyFolder.put(key_handle, record)
                    fs.remove_file(handle, pending_name(name))
        return result

    @staticmethod
    def _explicit_expiry(request: RetainRequest, meta: Meta, live: bool) -> dt.datetime | None:
        """The document's explicit expiry after ``request`` (P41); ``meta``: its sidecar, ``live``: it exists
        and has not expired.

        :raises InvalidRequest: an append naming an expiry other than the live document's.
        """
        if request.mode == "replace":
            return request.expires_at
        if request.expires_at is None:
            return meta.expires_at if live else None
        if not live or meta.expires_at == request.expires_at:
            return request.expires_at
        has = "no expiry" if meta.expires_at is None else f"the expiry {meta.expires_at.isoformat()}"
        raise InvalidRequest(
            f"{describe(request.ref.partition, request.ref.label)} has {has}, and this append names "
            f"expires_at {request.expires_at.isoformat()}: an expiry applies to the whole document. Append "
            "with the same expires_at (or none), replace the document, or write to a key of its own",
            field="expires_at",
        )

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref
        label = ref.label
        parts, name = location(ref.partition, ref.tier, ref.key)
        with self._storage(f"read {label}"), fs.open_dir(self.root, parts, create=False) as handle:
            found = fs.read_file(handle, name) if handle is not None else None
            if found is not None and handle is not None and read_meta(handle, name).expired(clock.now()):
                found = None  # expired: absent from that moment (P41), swept or not
        if found is None:
            return ReadResult(id=label, content="")
        return ReadResult(id=label, content=decode(found[0], ref.partition, label, self.root))

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        documents: list[LazyDocument] = []
        scoped: list[tuple[Partition, LazyDocument]] = []
        with self._storage("search the memory files"):
            for partition, tiers in request.scopes():
                found = list(self._index.documents(partition, tiers, now=clock.now()))
                documents.extend(found)
                scoped.extend((partition, doc) for doc in found)
        digests = {doc.source: doc.digest for doc in documents}
        vector = request.vector
        if vector is None:
            hits = text.search(query, documents, request.limit)
            return RecallResult(hits=[attrs.evolve(hit, digest=digests[hit.source]) for hit in hits])
        lexical = text.with_digests(text.search(query, documents, text.FUSION_DEPTH), digests)
        refs, matrix, lines = self._searched_vectors(scoped, vector)
        similar = text.similarities(vector, refs, matrix, lexical)

        def texts(wanted: Sequence[text.LineRef]) -> dict[text.LineRef, tuple[str, str]]:
            return {(source, number): (lines[source][number], digests[source]) for source, number in wanted}

        return RecallResult(hits=text.fuse(query, lexical, similar, texts, request.limit))

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.data_subject_id:
            with self._storage(f"erase data subject {request.data_subject_id!r}"):
                return ForgetResult(removed=self._forget_subject(request.workspace_id, request.data_subject_id))
        ref = request.ref
        parts, name = location(ref.partition, ref.tier, ref.key)
        with self._storage(f"remove {ref.label}"), fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return ForgetResult(removed=0)
            # An expired document is removed all the same, but it was absent already: it counts as none (P41).
            expired = read_meta(handle, name).expired(clock.now())
            removed = self._remove_document(handle, name, expected_subject=None, retry="repeat the forget")
            removed = removed and not expired
        self._index.drop(parts, name)
        self._vectors.drop(parts, name)
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
        try:
            overdue = self._overdue(clock.now())
        except (OSError, MemvaultError):
            overdue = 0  # the count is a hint; the store answered the probe
        return HealthStatus(ok=True, retention_overdue=overdue)

    def _overdue(self, now: dt.datetime) -> int:
        """How many documents are past their expiry and not swept yet: their sidecars are read, not their bodies."""
        count = 0
        for parts in self._vector_folders():
            with _quiet(), fs.open_dir(self.root, parts, create=False) as handle:
                if handle is None:
                    continue
                with os.scandir(handle.fd) as entries:
                    metas = [e.name for e in entries if e.name.startswith(".") and e.name.endswith(f".md{META_SUFFIX}")]
                for meta in metas:
                    name = meta[1 : -len(META_SUFFIX)]
                    if read_meta(handle, name).expired(now) and fs.lstat(handle, name) is not None:
                        count += 1
        return count

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
        parts = partition_parts(partition)
        now = clock.now()
        for tier in tiers:
            sub = SUBFOLDERS.get(tier)
            folder = parts if sub is None else (*parts, sub)
            with fs.open_dir(self.root, folder, create=False) as handle:
                if handle is None:
                    continue
                if sub is None:
                    names = [FIXED_FILES[tier]]
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
                    meta = read_meta(handle, name)
                    if meta.expired(now):
                        continue  # absent (P41)
                    found = fs.read_file(handle, name)
                    if found is None:
                        continue  # removed meanwhile
                    data, opened = found
                    yield self._info(
                        (partition.workspace_id, agent_id, crew_id, tier, label), handle, name, data, opened, meta
                    )

    def _info(
        self,
        where: tuple[str, str, str, Tier, str],
        handle: fs.DirHandle,
        name: str,
        data: bytes,
        opened: os.stat_result,
        meta: Meta,
    ) -> DocumentInfo:
        """A document's listing entry (P32): ``where`` is its workspace, agent, crew, tier and label."""
        workspace_id, agent_id, crew_id, tier, label = where
        return DocumentInfo(
            workspace_id=workspace_id,
            agent_id=agent_id,
            crew_id=crew_id,
            tier=tier,
            label=label,
            bytes=len(data),
            subjects=_subjects(self.root, handle, name),
            digest=hashlib.sha256(data).hexdigest(),
            updated_at=dt.datetime.fromtimestamp(opened.st_mtime, dt.timezone.utc),
            expires_at=meta.purge_at,
        )

    # -- memory over time (contract P41-P45) ----------------------------------------

    @hookimpl
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Remove expired documents as ``forget`` does (P24's guarantees: the file, its tags, its vectors,
        its sidecars, the crash leftovers of its folder), then expired quarantine copies and old keys."""
        documents: list[DocumentInfo] = []
        more = False
        quarantined = 0
        keys = 0
        with self._storage("sweep expired documents"):
            with fs.open_dir(self.root, (), create=False) as root:
                workspaces = _folders(root)
            for workspace in workspaces:
                swept: list[DocumentInfo] = []
                for parts in self._document_folders(workspace, lambda _path: _quiet()):
                    if len(documents) + len(swept) >= request.limit:
                        # Only a look: past the limit nothing more is removed by this call.
                        more = more or bool(self._expired_in(parts, attrs.evolve(request, dry_run=True), 1))
                        if more:
                            break
                        continue
                    swept.extend(self._expired_in(parts, request, request.limit - len(documents) - len(swept)))
                documents.extend(swept)
                quarantined += self._sweep_quarantine(workspace, request, swept)
                if request.keys_before is not None:
                    keys += KeyFolder(self.root, workspace).forget_before(request.keys_before, dry_run=request.dry_run)
        return SweepResult(documents=documents, quarantine_removed=quarantined, keys_removed=keys, more=more)

    def _expired_in(self, parts: tuple[str, ...], request: SweepRequest, limit: int) -> list[DocumentInfo]:
        """Up to ``limit`` documents of one folder past their expiry or their tier's retention, removed
        unless ``request.dry_run``."""
        out: list[DocumentInfo] = []
        workspace, kind, owner = parts[:3]
        agent_id, crew_id = (owner, "") if kind == "agents" else ("", owner)
        with _quiet(), fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return out
            for name in _document_names(parts, handle):
                if len(out) >= limit:
                    break
                label = name if len(parts) == 3 else f"{parts[3]}/{name}"
                tier = parse_label(label)[0]

                def expired(handle: fs.DirHandle = handle, name: str = name, tier: Tier = tier) -> bool:
                    current = fs.lstat(handle, name)
                    if current is None or not stat.S_ISREG(current.st_mode):
                        return False
                    written = dt.datetime.fromtimestamp(current.st_mtime, dt.timezone.utc)
                    return read_meta(handle, name).expired(request.now) or request.retention.past_retention(
                        workspace, tier, written, request.now
                    )

                if not expired():
                    continue
                found = fs.read_file(handle, name)
                if found is None:
                    continue
                data, opened = found
                info = self._info(
                    (workspace, agent_id, crew_id, tier, label), handle, name, data, opened, read_meta(handle, name)
                )
                del data
                if request.dry_run:
                    out.append(info)
                    continue
                # Re-checked under the lock: a write since the listing may have renewed it.
                retry = "run the sweep again"
                if self._remove_document(handle, name, expected_subject=None, retry=retry, only_if=expired):
                    out.append(info)
                self._index.drop(parts, name)
                self._vectors.drop(parts, name)
            if out and not request.dry_run:
                # As an erasure does (P24): no crash temporaries nor orphan vectors left in a folder it visits.
                fs.sweep_leftovers(handle, _guarding)
                remove_orphans(handle)
        return out

    def _sweep_quarantine(self, workspace: str, request: SweepRequest, swept: Sequence[DocumentInfo]) -> int:
        """Remove the workspace's quarantine copies that expired, are past their tier's retention (counted
        from when the copy was kept), or were kept for a document this sweep removed (a copy is the
        rejected final body: it holds the document's text); how many."""
        folder = self._quarantine(workspace)
        documents = {(d.agent_id, d.crew_id, d.label) for d in swept}
        removed = 0
        with _quiet(), folder.handle(create=False) as handle:
            if handle is None:
                return 0
            for record in folder.list():
                tier = parse_label(record.label)[0]
                if (
                    not _copy_expired(record, request.now)
                    and not request.retention.past_retention(workspace, tier, record.created_at, request.now)
                    and (record.agent_id, record.crew_id, record.label) not in documents
                ):
                    continue
                removed += 1
                if not request.dry_run:
                    folder.remove(record.sha256)
        return removed

    # -- vectors (contract P36-P40) ------------------------------------------------

    @hookimpl
    def memvault_vectors_pending(self, model_id: str, limit: int) -> list[PendingLine]:
        out: list[PendingLine] = []
        with self._storage("look for lines to embed"):
            for parts in self._vector_folders():
                with _quiet(), fs.open_dir(self.root, parts, create=False) as handle:
                    if handle is None:
                        continue
                    for name in _document_names(parts, handle):
                        out.extend(self._vectors.pending(handle, parts, name, model_id, limit - len(out)))
                        if len(out) >= limit:
                            return out
        return out

    @hookimpl
    def memvault_vectors_store(self, model_id: str, vectors: list[tuple[str, bytes]]) -> int:
        with self._storage("store the vectors of lines"):
            return self._vectors.store(model_id, vectors)

    @hookimpl
    def memvault_vectors_backlog(self, model_id: str) -> int:
        count = 0
        with self._storage("count the lines to embed"):
            for parts in self._vector_folders():
                with _quiet(), fs.open_dir(self.root, parts, create=False) as handle:
                    if handle is None:
                        continue
                    count += sum(
                        self._vectors.count(handle, parts, name, model_id) for name in _document_names(parts, handle)
                    )
        return count

    def _vector_folders(self) -> Iterator[tuple[str, ...]]:
        """Every folder below the root that holds documents (a folder that cannot be read is skipped:
        its documents are not searched either)."""
        workspaces: list[str] = []
        with _quiet(), fs.open_dir(self.root, (), create=False) as root:
            workspaces = _folders(root)
        for workspace in workspaces:
            yield from self._document_folders(workspace, lambda _path: _quiet())

    def _searched_vectors(
        self, scoped: Sequence[tuple[Partition, LazyDocument]], vector: QueryVector
    ) -> tuple[list[text.LineRef], Any, dict[str, dict[int, str]]]:
        """The vectors of ``vector``'s model of the searched documents' current lines (P38: only theirs):
        the lines, their vectors (one row each) and their texts by document and number.

        A sidecar or folder that cannot be read gives no vectors (its lines rank by their words).
        """
        import numpy as np

        folders: dict[tuple[str, ...], list[tuple[str, LazyDocument]]] = {}
        for partition, doc in scoped:
            sub, _, name = doc.source.rpartition("/")
            parts = partition_parts(partition)
            folders.setdefault((*parts, sub) if sub else parts, []).append((name, doc))
        refs: list[text.LineRef] = []
        chunks = []
        lines: dict[str, dict[int, str]] = {}
        for parts, docs in folders.items():
            with _quiet(), fs.open_dir(self.root, parts, create=False) as handle:
                if handle is None:
                    continue
                for name, doc in docs:
                    found, matrix, texts = self._vectors.searched(
                        handle,
                        parts,
                        name,
                        doc.source,
                        doc.digest,
                        functools.partial(_line_text, doc),
                        vector.model_id,
                        vector.dimensions,
                    )
                    if found:
                        refs.extend(found)
                        chunks.append(matrix)
                        lines[doc.source] = texts
        if not chunks:
            return refs, np.zeros((0, vector.dimensions), dtype=np.float32), lines
        return refs, np.concatenate(chunks), lines

    # -- quarantine -----------------------------------------------------------

    @hookimpl
    def memvault_quarantine_keep(self, record: QuarantineRecord) -> bool:
        folder = self._quarantine(record.workspace_id)
        with self._storage("keep a quarantine copy"):
            folder.keep(record)
        return True

    @hookimpl
    def memvault_quarantine_list(self, workspace_id: str) -> list[QuarantineRecord]:
        folder = self._quarantine(workspace_id)
        with self._storage("list quarantine copies"):
            now = clock.now()
            return [r for r in folder.list() if not _copy_expired(r, now)]  # absent once expired (P42)

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        folder = self._quarantine(workspace_id)
        with self._storage("read a quarantine copy"):
            record = folder.get(sha256)
        return None if record is None or _copy_expired(record, clock.now()) else record

    @hookimpl
    def memvault_quarantine_delete(self, workspace_id: str, sha256: str) -> int:
        """The copy's file, its crash leftovers and its lock go, and the folder is synced."""
        folder = self._quarantine(workspace_id)
        with self._storage("delete a quarantine copy"):
            return 1 if folder.remove(sha256) else 0

    # -- internals ------------------------------------------------------------

    def _remove_document(
        self,
        handle: fs.DirHandle,
        name: str,
        *,
        expected_subject: str | None,
        retry: str,
        only_if: Callable[[], bool] | None = None,
    ) -> bool:
        """Unlink a document, its subject tag, its sidecars and its lock sentinel (under the lock).

        With ``expected_subject`` set, only when the tag still names that subject; with ``only_if``,
        only when it answers true under the lock (the sweep: the document is still expired). A symlink or
        a folder at the document's path is left alone, tag included (a retry finds it again), and
        raised as an ``UpstreamError`` naming the path and saying what to do, then ``retry``.
        """
        with fs.document_lock(handle, name):
            current = fs.lstat(handle, name)
            if current is not None and stat.S_ISLNK(current.st_mode):
                raise fs.SymlinkRefused(
                    f"{handle.relpath}/{name} is a symlink; local-disk never follows or removes symlinks. "
                    f"Remove it by hand, then {retry}"
                )
            if current is not None and stat.S_ISDIR(current.st_mode):
                raise UpstreamError(
                    f"{handle.relpath}/{name} is a directory, not a document file: move it away, then {retry}"
                )
            if expected_subject is not None and expected_subject not in _read_subjects(handle, name):
                return False
            if only_if is not None and not only_if():
                return False
            # A crashed keyed write of this document is settled first: its key is kept when it wrote.
            settle(handle, name, KeyFolder(self.root, handle.relpath.split("/", 1)[0]))
            fs.remove_file(handle, sidecar_name(name))  # derived data first: a crash leaves no orphan vectors
            removed = fs.remove_file(handle, name)
            fs.remove_file(handle, _subject_name(name))
            fs.remove_file(handle, meta_name(name))
            _sweep(handle, name)
            fs.remove_file(handle, fs.lock_name(name))
            os.fsync(handle.fd)
        return removed

    def _forget_subject(self, workspace: str, subject: str) -> int:
        """Erase everything of ``subject`` it can (P24), then raise one error naming every path it could not.

        :raises UpstreamError: when anything was left, so the erasure is never reported complete.
        """
        with fs.open_dir(self.root, (workspace,), create=False) as ws:
            if ws is None:
                return 0
        unfinished = fs.Unfinished("repeat the erasure")
        # Copies of rejected appends to the subject's documents hold their text (a copy is the final
        # body): they go first, while the tags still say which documents those are (a crash in
        # between leaves them findable by a repeat).
        QuarantineFolder(self.root, workspace).forget_subject(
            subject, unfinished, documents=self._subject_documents(workspace, subject)
        )
        removed = 0
        for parts in self._document_folders(workspace, unfinished.attempt):
            removed += self._forget_subject_in(parts, subject, unfinished)
        if unfinished:
            problems = unfinished.problems
            raise UpstreamError(
                f"local-disk could not finish erasing data subject {subject!r} in workspace {workspace!r} "
                f"under root {str(self.root)!r}: {removed} document(s) were erased, but "
                f"{len(problems)} path(s) could not be handled and may still hold the subject's data: "
                + "; ".join(problems)
            ) from unfinished.cause
        return removed

    def _document_folders(
        self, workspace: str, guard: Callable[[str], AbstractContextManager[object]]
    ) -> Iterator[tuple[str, ...]]:
        """The parts of every folder holding the workspace's documents: each agent's and crew's own
        folder and its keyed tiers' sub-folders. Listing a kind's owners runs under ``guard(path)``."""
        for kind in ("agents", "crews"):
            owners: list[str] = []
            with guard(f"{workspace}/{kind}"), fs.open_dir(self.root, (workspace, kind), create=False) as owners_dir:
                if owners_dir is not None:
                    with os.scandir(owners_dir.fd) as entries:
                        owners = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
            for owner in owners:
                if owner.startswith("."):
                    continue
                base = (workspace, kind, owner)
                yield base
                yield from ((*base, sub) for sub in SUBFOLDERS.values())

    def _subject_documents(self, workspace: str, subject: str) -> set[tuple[str, str, str]]:
        """``(agent_id, crew_id, label)`` of the workspace's documents whose tag names ``subject``.

        Read without locks or errors: what cannot be read here is met (and reported) by the erasure's
        own walk, and a document tagged meanwhile is a later write's, outside this erasure.
        """
        found: set[tuple[str, str, str]] = set()

        def quiet(_path: str) -> AbstractContextManager[object]:
            return contextlib.suppress(OSError, MemvaultError)

        for parts in self._document_folders(workspace, quiet):
            _, kind, owner, *sub = parts
            who = (owner, "") if kind == "agents" else ("", owner)
            with quiet(""), fs.open_dir(self.root, parts, create=False) as handle:
                if handle is None:
                    continue
                with os.scandir(handle.fd) as entries:
                    tags = [e.name for e in entries if e.name.startswith(".") and e.name.endswith(".md.subject")]
                for tag in tags:
                    data = fs.read_file(handle, tag)
                    if data is not None and subject in _parse_subjects(data[0]):
                        found.add((*who, "/".join((*sub, tag[1 : -len(".subject")]))))
        return found

    def _forget_subject_in(self, parts: tuple[str, ...], subject: str, unfinished: fs.Unfinished) -> int:
        """Erase the subject's documents of one folder; what cannot be handled is noted in ``unfinished``."""
        removed = 0
        with unfinished.attempt("/".join(parts)), fs.open_dir(self.root, parts, create=False) as handle:
            if handle is None:
                return 0
            with os.scandir(handle.fd) as entries:
                tags = sorted(e.name for e in entries if e.name.startswith(".") and e.name.endswith(".md.subject"))
            for tag in tags:
                name = tag[1 : -len(".subject")]
                with unfinished.attempt(f"{handle.relpath}/{name}", folder=handle.relpath):
                    found = fs.read_file(handle, tag)
                    if found is None or subject not in _parse_subjects(found[0]):  # exact match (P13)
                        continue
                    if self._remove_document(handle, name, expected_subject=subject, retry=unfinished.retry):
                        removed += 1
                    self._index.drop(parts, name)
                    self._vectors.drop(parts, name)
            # A crash's temporaries may hold the subject's text or id (a tag file's, a document's
            # mid-append) with no tag naming the subject: an erasure leaves none in a folder it visits.
            with unfinished.attempt(handle.relpath, folder=handle.relpath):
                fs.sweep_leftovers(handle, _guarding)
            # And the vectors of documents deleted by hand (no tag names them: their text is gone).
            with unfinished.attempt(handle.relpath, folder=handle.relpath):
                remove_orphans(handle)
        return removed


def _copy_expired(record: QuarantineRecord, now: dt.datetime) -> bool:
    return record.expires_at is not None and record.expires_at <= now


def _body(handle: fs.DirHandle, name: str) -> bytes:
    """The bytes of document ``name`` (``b""``: none)."""
    found = fs.read_file(handle, name)
    return found[0] if found is not None else b""


def _quiet() -> AbstractContextManager[object]:
    return contextlib.suppress(OSError, MemvaultError)


def _line_text(doc: LazyDocument, number: int) -> str | None:
    """The text of indexed line ``number`` of ``doc`` (``None``: no such indexed line)."""
    if number < 1:
        return None
    try:
        return doc.line(number - 1).text
    except IndexError:
        return None


def _document_names(parts: tuple[str, ...], handle: fs.DirHandle) -> list[str]:
    """The names of the documents recall searches in the folder ``parts`` (open as ``handle``)."""
    crew = parts[1] == "crews"
    if len(parts) == 3:
        tiers = [Tier.CREW] if crew else [t for t in Tier if t.is_agent_tier]
        return [FIXED_FILES[t] for t in tiers if t in FIXED_FILES]
    if crew:
        return []
    with os.scandir(handle.fd) as entries:
        names = sorted(e.name for e in entries if not e.name.startswith("."))
    out = []
    for name in names:
        try:
            parse_label(f"{parts[3]}/{name}")
        except InvalidRequest:
            continue
        out.append(name)
    return out


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


def _subjects(root: Path, handle: fs.DirHandle, name: str) -> tuple[str, ...]:
    """The data subjects a document carries (P13): its ``.<name>.subject`` tag file, one subject a line.

    A line that is no subject id (the file edited by hand) is skipped with a
    :class:`~memvault.errors.SkippedUnreadable` warning naming the file: no erasure can name
    such a line (subject ids are validated), so listing or exporting without it loses nothing
    erasable, and the valid subjects of the file are kept.
    """
    subjects: list[str] = []
    bad: list[str] = []
    for line in sorted(_read_subjects(handle, name)):
        try:
            subjects.append(validate_identifier(line, "data_subject_id"))
        except InvalidRequest:
            bad.append(line)
    if bad:
        path = root / handle.relpath / _subject_name(name)
        warnings.warn(
            SkippedUnreadable(
                f"tag file of {handle.relpath}/{name}: {len(bad)} line(s) are no data subject id "
                f"({bad[0][:80]!r}{', ...' if len(bad) > 1 else ''}; edited by hand?): remove them from {path} "
                "(one subject id per line); the document's other subjects are kept",
                where=str(path),
            ),
            stacklevel=3,
        )
    return tuple(subjects)
