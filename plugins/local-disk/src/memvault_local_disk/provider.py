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
lines, for recall by meaning: :mod:`memvault_local_disk.vectors`) and
``.<name>.tmp-*`` (a write in flight). Recall and read only ever open exact
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
from memvault.contract.embedding import PendingLine, QueryVector
from memvault.contract.errors import InvalidRequest, MemvaultError, SkippedUnreadable, UpstreamError
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
    if target.startswith(".") and target.endswith(SUFFIX):  # a sidecar of vectors
        return target[1 : -len(SUFFIX)]
    return target


def _sweep(handle: fs.DirHandle, name: str) -> None:
    """Remove what a crashed writer of document ``name`` left: its, its tag file's and its sidecar's
    temporaries (caller holds the document's lock). A tag file's temporary holds data subject ids."""
    fs.sweep_temporaries(handle, name)
    fs.sweep_temporaries(handle, _subject_name(name))
    fs.sweep_temporaries(handle, sidecar_name(name))


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
        label = ref.label
        parts, name = location(ref.partition, ref.tier, ref.key)
        with self._storage(f"write {label}"), fs.open_dir(self.root, parts, create=True) as handle:
            assert handle is not None
            with fs.document_lock(handle, name):
                _sweep(handle, name)
                current = fs.lstat(handle, name)
                if current is not None and stat.S_ISLNK(current.st_mode):
                    raise fs.SymlinkRefused(
                        f"{describe(ref.partition, label)} is a symlink; local-disk never follows symlinks. "
                        "Replace it with a regular file"
                    )
                if current is not None and not stat.S_ISREG(current.st_mode):
                    raise UpstreamError(f"{describe(ref.partition, label)} is not a regular file on disk: move it away")
                old = b""
                old_mode = fs.FILE_MODE
                current_size = 0
                stored = ""
                if current is not None:
                    old_mode = stat.S_IMODE(current.st_mode)
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
                if current is None:  # a new document starts with no vectors
                    fs.remove_file(handle, sidecar_name(name))
                elif request.mode == "replace":
                    # The vectors of the lines a replace changes go before it (derived data of text that is
                    # gone, P40); those of lines it keeps word for word stay, as in every other provider.
                    keep_current_entries(handle, name, request.content)
                fs.write_atomic(handle, name, body, mode=old_mode)
        return RetainResult(id=label, bytes=len(body), warning=warning)

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref
        label = ref.label
        parts, name = location(ref.partition, ref.tier, ref.key)
        with self._storage(f"read {label}"), fs.open_dir(self.root, parts, create=False) as handle:
            found = fs.read_file(handle, name) if handle is not None else None
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
                found = list(self._index.documents(partition, tiers))
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
            removed = self._remove_document(handle, name, expected_subject=None, retry="repeat the forget")
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
        parts = partition_parts(partition)
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
                        subjects=_subjects(self.root, handle, name),
                        digest=hashlib.sha256(data).hexdigest(),
                        updated_at=dt.datetime.fromtimestamp(opened.st_mtime, dt.timezone.utc),
                    )

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
            return folder.list()

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        folder = self._quarantine(workspace_id)
        with self._storage("read a quarantine copy"):
            return folder.get(sha256)

    # -- internals ------------------------------------------------------------

    def _remove_document(self, handle: fs.DirHandle, name: str, *, expected_subject: str | None, retry: str) -> bool:
        """Unlink a document, its subject tag and its lock sentinel (under the lock).

        With ``expected_subject`` set, only when the tag still names that subject. A symlink or
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
            fs.remove_file(handle, sidecar_name(name))  # derived data first: a crash leaves no orphan vectors
            removed = fs.remove_file(handle, name)
            fs.remove_file(handle, _subject_name(name))
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
