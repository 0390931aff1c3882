"""Layer 6: moving memory between providers: the versioned JSON Lines export format, export and import.

An export file is UTF-8 JSON Lines, one object per line, each with a ``kind``:

1. ``header``: ``{"kind": "header", "format": "memvault-export", "version": 1,
   "created_at": ..., "provider": ..., "workspace_id": ...}`` (``workspace_id``
   empty: every workspace);
2. ``document`` lines: ``{"kind": "document", "document": DocumentInfo, "body": ...}``;
3. ``quarantine`` lines: ``{"kind": "quarantine", "record": QuarantineRecord}``;
4. ``end``: ``{"kind": "end", "documents": N, "quarantine": M, "withheld": W}``.

The shapes are :mod:`memvault.contract.wire`'s. The trailer makes a truncated file an
error instead of a silent partial import; each document's ``digest`` and
``bytes`` make a damaged body an error naming its line.

Import reads the file twice. The first pass checks every line as the write
path would (identifiers, subjects, tier and label, the tier's cap, real UTF-8
text, one line per document, each quarantine copy's sha256 against its
content) and builds every request it will send, then compares the file with
the target store; it refuses, having written nothing, on any line that fails
or on a document the target holds with other content. The second pass writes.
It writes through the public ``retain`` verb: a body with subjects ``s1..sn``
is stored with one ``replace`` per subject, which leaves the body unchanged
and, by contract P13, tags the document with every subject. Documents and
quarantine copies the target already holds are skipped, so a second run
changes nothing. ``--replace`` overwrites a document with the file's body
before it forgets anything (and forgets only to drop subjects the file does
not name), so a failed write never leaves the old document lost.

Expiring memory stays expiring (contract P42): export leaves out what has
expired and carries each document's expiry (``DocumentInfo.expires_at``, its
effective expiry) and each quarantine copy's; import writes them back, leaves
out (and lists) what expired since the export, and refuses, before writing, a
file with expiring content for a target that cannot store expiries: an import
never makes expiring content permanent.

May import: the facade and every layer below it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import IO, Any, Final

import attrs
from attrs import field, frozen

from memvault.contract import clock
from memvault.contract.errors import ContentRejected, InvalidRequest, MemvaultError, NotSupported
from memvault.contract.models import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ListDocumentsRequest,
    QuarantineRecord,
    ReadRequest,
    RetainRequest,
    Tier,
    body_sha256,
    check_cap,
    parse_label,
    validate_identifier,
)
from memvault.contract.wire import structure, unstructure
from memvault.vault import GROUP_SIZE, Vault

__all__ = [
    "FORMAT",
    "MAX_LINE_CHARS",
    "VERSION",
    "ExportFileError",
    "ExportSummary",
    "ImportConflict",
    "ImportSummary",
    "Mismatch",
    "export_store",
    "import_store",
    "verify_import",
]

FORMAT: Final = "memvault-export"
VERSION: Final = 1
#: The longest line an import reads (characters, newline included); a longer one is refused unread. The
#: largest document a tier's cap allows is 30,000 bytes (daily), a few times that once escaped as JSON;
#: only an uncapped ``lessons`` document (which import leaves out) could come near it.
MAX_LINE_CHARS: Final = 16 * 1024 * 1024

Progress = Callable[[int], None]


class ExportFileError(InvalidRequest):
    """The export file is malformed, damaged, truncated or from a newer memvault; ``line`` says where."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}, line {line}: {message}", field="file")
        self.path = path
        self.line = line


class ImportConflict(InvalidRequest):
    """The target holds documents with other content than the file's; nothing was written."""

    def __init__(self, conflicts: list[str]) -> None:
        shown = "; ".join(conflicts[:5]) + (f"; and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
        super().__init__(
            f"{len(conflicts)} document(s) already exist in the target with other content ({shown}); nothing "
            "was written: import into an empty store, or pass --replace to overwrite them with the file's",
            field="file",
        )
        self.conflicts = conflicts


# -- the line shapes -----------------------------------------------------------------


@frozen(kw_only=True)
class ExportHeader:
    format: str
    version: int
    created_at: _dt.datetime
    provider: str = ""
    workspace_id: str = ""


@frozen(kw_only=True)
class ExportedDocument:
    document: DocumentInfo
    body: str


@frozen(kw_only=True)
class ExportedQuarantine:
    record: QuarantineRecord


@frozen(kw_only=True)
class ExportEnd:
    documents: int
    quarantine: int
    withheld: int = 0


_KINDS: Final[dict[str, type]] = {
    "header": ExportHeader,
    "document": ExportedDocument,
    "quarantine": ExportedQuarantine,
    "end": ExportEnd,
}


def _line(kind: str, value: object) -> str:
    return json.dumps({"kind": kind, **unstructure(value)}, ensure_ascii=False, separators=(",", ":")) + "\n"


_digest = body_sha256


# -- export ----------------------------------------------------------------------------


@frozen(kw_only=True)
class ExportSummary:
    """What an export wrote; ``withheld`` lists documents whose text the provider would not return."""

    documents: int
    quarantine: int
    bytes: int
    withheld: list[str] = field(factory=list)


def _read_request(info: DocumentInfo) -> ReadRequest:
    tier, key = parse_label(info.label, "label")
    return ReadRequest(workspace_id=info.workspace_id, agent_id=info.agent_id, crew_id=info.crew_id, tier=tier, key=key)


def _where(info: DocumentInfo) -> str:
    owner = f"crew {info.crew_id}" if info.tier is Tier.CREW else f"agent {info.agent_id}"
    return f"{info.label} of {owner} in workspace {info.workspace_id}"


def _has_hook(vault: Vault, hook: str) -> bool:
    return any(impl.plugin is vault.provider for impl in getattr(vault.plugin_manager.hook, hook).get_hookimpls())


def export_store(
    vault: Vault,
    out: IO[str],
    *,
    workspace_id: str = "",
    on_total: Progress | None = None,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write one workspace (or every one, for ``""``) of ``vault`` to ``out`` as an export file.

    Open the vault with ``scanner="off"`` to export every body as stored: with a
    scanner, a quarantined document reads back as a placeholder and is withheld.

    :param on_total: called once with the number of documents to export.
    :param progress: called with 1 after each document.
    :raises NotSupported: when the provider cannot enumerate its documents.
    """
    listing = vault.list_documents(ListDocumentsRequest(workspace_id=workspace_id)).documents
    if on_total is not None:
        on_total(len(listing))
    header = ExportHeader(
        format=FORMAT,
        version=VERSION,
        created_at=_dt.datetime.now(_dt.timezone.utc),
        provider=vault.name,
        workspace_id=workspace_id,
    )
    out.write(_line("header", header))
    written = size = 0
    withheld: list[str] = []
    for info in listing:
        result = vault.read(_read_request(info))
        if result.quarantine is not None:
            withheld.append(_where(info))
        elif result.content:  # "" means it was removed after the listing
            body = result.content
            current = attrs.evolve(info, bytes=len(body.encode("utf-8")), digest=_digest(body))
            out.write(_line("document", ExportedDocument(document=current, body=body)))
            written += 1
            size += current.bytes
        if progress is not None:
            progress(1)
    records = 0
    if _has_hook(vault, "memvault_quarantine_list"):
        workspaces = [workspace_id] if workspace_id else sorted({d.workspace_id for d in listing})
        for ws in workspaces:
            for record in vault.quarantine_list(ws):
                out.write(_line("quarantine", ExportedQuarantine(record=record)))
                records += 1
    out.write(_line("end", ExportEnd(documents=written, quarantine=records, withheld=len(withheld))))
    return ExportSummary(documents=written, quarantine=records, bytes=size, withheld=withheld)


# -- reading a file --------------------------------------------------------------------


def _entries(path: Path, name: str | None = None) -> Iterator[tuple[int, object]]:
    """Every line of an export file after the header, checked; the trailer last. Raises ExportFileError.

    Each document line is checked as the write path checks it (:func:`_check_document`), and a
    document that two lines hold is refused naming both. ``name`` is how messages name the file
    (default: its path).
    """
    name = str(path) if name is None else name
    try:
        handle = path.open("r", encoding="utf-8", newline="\n")
    except OSError as exc:
        raise InvalidRequest(f"cannot open export file {name}: {exc.strerror or exc}", field="file") from exc
    with handle:
        number = 0
        header: ExportHeader | None = None
        end: ExportEnd | None = None
        counts = {"document": 0, "quarantine": 0}
        seen: dict[_DocKey, int] = {}
        while True:
            try:
                raw = handle.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError as exc:
                raise ExportFileError(name, number + 1, f"not UTF-8 text ({exc.reason})") from None
            if not raw:
                break
            number += 1
            if len(raw) > MAX_LINE_CHARS and not raw.endswith("\n"):
                raise ExportFileError(
                    name,
                    number,
                    f"the line is longer than {MAX_LINE_CHARS:,} characters, longer than any document or "
                    "quarantine copy memvault writes: the file is damaged or not an export (a lessons "
                    "document that large is copied by hand)",
                )
            if end is not None:
                raise ExportFileError(name, number, "text after the end line: the file was damaged or concatenated")
            if not raw.endswith("\n"):
                raise ExportFileError(name, number, "the last line is cut off: the file is truncated")
            data = _parse(name, number, raw)
            kind = data.pop("kind", None)
            if header is None:
                header = _header(name, number, kind, data)
                continue
            cls = _KINDS.get(kind) if isinstance(kind, str) else None
            if cls is None or cls is ExportHeader:
                raise ExportFileError(name, number, f"unknown line kind {kind!r}: expected document, quarantine or end")
            try:
                entry: object = structure(data, cls, what=f"{kind} line")
            except InvalidRequest as exc:
                raise ExportFileError(name, number, str(exc)) from None
            if isinstance(entry, ExportEnd):
                if (entry.documents, entry.quarantine) != (counts["document"], counts["quarantine"]):
                    raise ExportFileError(
                        name,
                        number,
                        f"the end line counts {entry.documents} documents and {entry.quarantine} quarantine "
                        f"copies, the file holds {counts['document']} and {counts['quarantine']}: it was edited "
                        "or damaged",
                    )
                end = entry
            elif isinstance(entry, ExportedDocument):
                _check_document(name, number, entry)
                first = seen.setdefault(_key(entry.document), number)
                if first != number:
                    raise ExportFileError(
                        name,
                        number,
                        f"{_where(entry.document)} is on line {first} too: an export holds each document once, "
                        "so the file was edited or concatenated; keep the line you want and remove the other "
                        "(and correct the end line's count)",
                    )
                counts["document"] += 1
            else:
                assert isinstance(entry, ExportedQuarantine)
                _check_quarantine(name, number, entry.record)
                counts["quarantine"] += 1
            yield number, entry
        if header is None:
            raise ExportFileError(name, max(number, 1), "the file is empty: it is not a memvault export")
        if end is None:
            raise ExportFileError(
                name, number + 1, "the end line is missing: the file is truncated (the export did not finish)"
            )


def _parse(name: str, number: int, raw: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ExportFileError(name, number, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ExportFileError(name, number, f"expected a JSON object, got {type(data).__name__}")
    return data


def _header(name: str, number: int, kind: object, data: dict[str, Any]) -> ExportHeader:
    if kind != "header" or data.get("format") != FORMAT:
        raise ExportFileError(name, number, f"not a memvault export file (its first line is not a {FORMAT!r} header)")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ExportFileError(name, number, f"the header's version {version!r} is not a positive integer")
    if version > VERSION:
        raise ExportFileError(
            name,
            number,
            f"the file has format version {version}, newer than the {VERSION} this memvault reads (a newer "
            "memvault wrote it): upgrade memvault to read it",
        )
    try:
        return structure(data, ExportHeader, what="header")
    except InvalidRequest as exc:
        raise ExportFileError(name, number, str(exc)) from None


def _check_document(name: str, number: int, entry: ExportedDocument) -> None:
    """Check a document line as the write path would: every request that stores it is built here.

    :raises ExportFileError: for a bad address, owner, subject, tier, body or size and digest.
    :raises CapExceeded: for a body over its tier's cap, naming the document and the line.
    """
    info = entry.document
    try:
        tier, _key = parse_label(info.label, "label")
    except InvalidRequest as exc:
        raise ExportFileError(name, number, str(exc)) from None
    if tier is not info.tier:
        raise ExportFileError(name, number, f"label {info.label!r} does not belong to tier {info.tier.value}")
    # The target lists a document under its one owner: a line naming both would not be found there.
    other, owner = ("agent_id", "crew") if tier is Tier.CREW else ("crew_id", "agent")
    if getattr(info, other):
        raise ExportFileError(
            name,
            number,
            f"{info.label} of tier {tier.value} has {other} {getattr(info, other)[:140]!r}: a {tier.value} "
            f"document belongs to its {owner} alone, so {other} must be empty",
        )
    if not entry.body:
        raise ExportFileError(name, number, "the document's body is empty")
    try:
        size = len(entry.body.encode("utf-8"))
    except UnicodeEncodeError:
        raise ExportFileError(
            name,
            number,
            f"the body of {info.label} holds a lone surrogate (a \\ud800-\\udfff escape alone), which is not "
            "UTF-8 text and cannot be stored: the file was damaged or hand-edited",
        ) from None
    if size != info.bytes or _digest(entry.body) != info.digest:
        raise ExportFileError(
            name, number, f"the body of {info.label} does not match its recorded size and digest: the file is damaged"
        )
    try:
        for subject in info.subjects:  # named as the file names them (the request would say data_subject_id)
            validate_identifier(subject, "data subject")
        if tier is Tier.LESSONS:
            _read_request(info)  # its address only: import leaves lessons out (P8), nothing is written for them
        else:
            _requests(info, entry.body, info.subjects)  # every retain the import would send, built (so checked) now
    except InvalidRequest as exc:
        raise ExportFileError(name, number, f"{_where(info)}: {exc}") from None
    if tier is not Tier.LESSONS:
        with _naming(info, number):
            check_cap(tier, current=0, projected=size)  # every write is a replace: the body is the final body


def _check_quarantine(name: str, number: int, record: QuarantineRecord) -> None:
    """A quarantine copy's ``sha256`` is its content's: the key it is found, listed and erased by."""
    if _digest(record.content) != record.sha256:
        raise ExportFileError(
            name,
            number,
            f"the quarantine copy {record.sha256[:16]} of {record.label} does not match its content's sha256: "
            "the file is damaged or was edited",
        )


# -- import ----------------------------------------------------------------------------


@frozen(kw_only=True)
class ImportSummary:
    """What an import did: documents written, re-tagged, skipped (already there), and left out."""

    written: int
    tagged: int
    unchanged: int
    quarantine_kept: int
    quarantine_unchanged: int
    not_imported: list[str] = field(factory=list)
    #: Documents of the file that expired after the export (P42): gone, as in the source, so not imported.
    expired: list[str] = field(factory=list)


_DocKey = tuple[str, str, str, str]


def _key(info: DocumentInfo) -> _DocKey:
    return (info.workspace_id, info.agent_id, info.crew_id, info.label)


class _Target:
    """What the target store holds, learnt lazily per workspace."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.listable = _has_hook(vault, "memvault_list_documents")
        self.quarantines = _has_hook(vault, "memvault_quarantine_list")
        self._docs: dict[str, dict[_DocKey, DocumentInfo]] = {}
        self._copies: dict[str, set[str]] = {}

    def document(self, info: DocumentInfo) -> tuple[str, frozenset[str] | None] | None:
        """(digest, subjects or None when unknown) of the target's document, or None when it has none."""
        if self.listable:
            docs = self._docs.get(info.workspace_id)
            if docs is None:
                listing = self.vault.list_documents(ListDocumentsRequest(workspace_id=info.workspace_id))
                docs = self._docs[info.workspace_id] = {_key(d): d for d in listing.documents}
            found = docs.get(_key(info))
            return None if found is None else (found.digest, frozenset(found.subjects))
        result = self.vault.read(_read_request(info))
        if not result.content:
            return None
        return _digest(result.content), None

    def has_copy(self, record: QuarantineRecord) -> bool:
        copies = self._copies.get(record.workspace_id)
        if copies is None:
            found = self.vault.quarantine_list(record.workspace_id)
            copies = self._copies[record.workspace_id] = {r.sha256 for r in found}
        return record.sha256 in copies

    def kept(self, record: QuarantineRecord) -> None:
        """Remember a copy just kept, so a second copy of the same body in the file is not kept twice."""
        self._copies.setdefault(record.workspace_id, set()).add(record.sha256)


@frozen(kw_only=True)
class _Step:
    action: str  # "write", "replace", "tag", "skip", "refuse", "conflict", "expired"
    info: DocumentInfo  # the document line as the first pass read it
    subjects: tuple[str, ...]  # the subjects to write, in order
    #: ``replace`` only: the target's document carries subjects the file does not name (or the target
    #: cannot say), so after the file's body overwrites it, it is forgotten and written again.
    forget: bool = False


def _plan(target: _Target, entry: ExportedDocument, replace: bool) -> _Step:
    """What the import does for one (checked) document line, given what the target holds."""
    info = entry.document
    if info.expires_at is not None and info.expires_at <= clock.now():
        return _Step(action="expired", info=info, subjects=())  # gone since the export (P42)
    have = target.document(info)
    forget = False
    if have is None:
        action, subjects = "write", info.subjects
    elif have[0] == info.digest:
        known = have[1]
        subjects = info.subjects if known is None else tuple(s for s in info.subjects if s not in known)
        action = "tag" if subjects else "skip"
    else:
        action, subjects = ("replace" if replace else "conflict"), info.subjects
        forget = have[1] is None or not have[1] <= set(info.subjects)
    if info.tier is Tier.LESSONS and action not in ("skip", "conflict"):
        action = "refuse"  # P8: no verb writes lessons; the operator copies them
    return _Step(action=action, info=info, subjects=subjects, forget=forget and action == "replace")


def _requests(info: DocumentInfo, body: str, subjects: tuple[str, ...]) -> list[RetainRequest]:
    """The retains that store ``body`` as the document ``info`` names, one ``replace`` tagged with
    each of ``subjects`` (one untagged for none)."""
    tier, key = parse_label(info.label, "label")
    return [
        RetainRequest(
            workspace_id=info.workspace_id,
            agent_id=info.agent_id,
            crew_id=info.crew_id,
            tier=tier,
            key=key,
            content=body,
            mode="replace",
            data_subject_id=subject,
            expires_at=info.expires_at,
        )
        for subject in subjects or ("",)
    ]


def _forget(vault: Vault, info: DocumentInfo) -> None:
    """Forget the target's copy of a document ``--replace`` overwrites, so it carries only the file's subjects."""
    vault.forget(
        ForgetRequest(workspace_id=info.workspace_id, agent_id=info.agent_id, crew_id=info.crew_id, id=info.label)
    )


def import_store(
    vault: Vault,
    path: Path,
    *,
    replace: bool = False,
    jobs: int = 4,
    on_total: Progress | None = None,
    progress: Progress | None = None,
    name: str | None = None,
) -> ImportSummary:
    """Import an export file into ``vault``; running it again changes nothing.

    Every line is checked, and every request built, before the first write: a file
    the import refuses leaves the target as it was. Open the vault with
    ``scanner="off"`` to store bodies exactly as exported (the target's scanner still
    quarantines them on read-back, P29). With a scanner, a document it rejects is
    not written (a ``--replace`` keeps the target's document) and is listed in
    ``not_imported``; the import goes on with the others.

    :param replace: overwrite documents the target holds with other content. Each is
        overwritten with the file's body first; one that carries subjects the file
        does not name is then forgotten and written again, so it carries only the
        file's subjects.
    :param jobs: how many documents are written at once (their order does not matter). A provider
        with a write group (``vault.writes_in_groups``: sqlite) takes the documents' retains in
        lists of up to ``GROUP_SIZE`` instead (:meth:`Vault.retain_many`, one transaction each),
        one list at a time, and ``jobs`` does not apply.
    :param name: how error messages name the file (default: ``path``; ``"<stdin>"`` for a spooled pipe).
    :raises ExportFileError: for a malformed, damaged, truncated or newer file, a line the write
        path would refuse (a bad identifier or subject, a lone surrogate) or a document two lines
        hold, before writing anything.
    :raises CapExceeded: for a document over its tier's cap, before writing anything.
    :raises ImportConflict: for documents the target holds with other content, before writing anything.
    """
    target = _Target(vault)
    plan: dict[int, _Step] = {}
    conflicts: list[str] = []
    expiring: list[int] = []
    for number, entry in _entries(path, name):
        if isinstance(entry, ExportedDocument):
            with _naming(entry.document, number):
                step = plan[number] = _plan(target, entry, replace)
            if step.action == "conflict":
                conflicts.append(f"{_where(entry.document)} (line {number})")
            if entry.document.expires_at is not None:
                expiring.append(number)
        elif isinstance(entry, ExportedQuarantine) and entry.record.expires_at is not None:
            expiring.append(number)
    if expiring and Capability.EXPIRY not in vault.capabilities:
        shown = ", ".join(str(n) for n in expiring[:5]) + (" ..." if len(expiring) > 5 else "")
        raise NotSupported(
            f"provider {vault.name!r} does not store expiries (it lacks the 'expiry' capability), and "
            f"{len(expiring)} line(s) of the file expire (lines {shown}): importing them would keep them for "
            "ever; nothing was written. Import into a provider with the 'expiry' capability"
        )
    if conflicts:
        raise ImportConflict(conflicts)
    if on_total is not None:
        on_total(len(plan))
    counts = {"written": 0, "tagged": 0, "unchanged": 0}
    kept = same = 0
    refused: list[str] = []
    expired: list[str] = []
    rejected: dict[int, str] = {}  # line -> why the target's scanner rejected its document
    pending: set[Future[str]] = set()

    def settle(block_until: int) -> None:
        """Collect finished writes until at most ``block_until`` are pending; the first error stops the import."""
        nonlocal pending
        while len(pending) > block_until:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                error = future.exception()
                if error is not None:
                    for other in pending:
                        other.cancel()
                    wait(pending)
                    raise error
                outcome = future.result()
                if outcome in counts:
                    counts[outcome] += 1
                if progress is not None:
                    progress(1)

    # Writes to different documents are independent: several in flight hide each
    # write's fsync (local-disk) or commit latency. A document's own writes stay in order.
    # A provider with a write group (sqlite) commits many retains in one transaction
    # instead: one list of up to GROUP_SIZE retains at a time, no threads.
    grouped = _Grouped(vault, counts, rejected, progress) if vault.writes_in_groups else None
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="memvault-import") as pool:
        for number, entry in _entries(path, name):
            if isinstance(entry, ExportedQuarantine):
                record = entry.record
                if record.expires_at is not None and record.expires_at <= clock.now():
                    continue  # expired since the export: gone, as the source's sweep would remove it
                if not target.quarantines:
                    refused.append(f"quarantine copy {record.sha256[:16]} (the target keeps no quarantine copies)")
                elif target.has_copy(record):
                    same += 1
                else:
                    if not vault.quarantine_keep(record):
                        raise MemvaultError(f"provider {vault.name!r} did not keep quarantine copy {record.sha256}")
                    target.kept(record)
                    kept += 1
                continue
            if not isinstance(entry, ExportedDocument):
                continue
            planned = plan.get(number)
            if planned is None or planned.info != entry.document:
                settle(0)
                if grouped is not None:
                    grouped.flush()
                raise ExportFileError(
                    name or str(path), number, "the file changed while it was being imported: import it again"
                )
            if planned.action == "refuse":
                refused.append(f"{_where(entry.document)} (lessons are read-only through retain: copy them by hand)")
                continue
            if planned.action == "expired":
                assert entry.document.expires_at is not None
                when = entry.document.expires_at.isoformat()
                expired.append(f"{_where(entry.document)} (line {number}: expired at {when})")
                continue
            if grouped is not None:
                grouped.add(number, entry, planned)
            else:
                pending.add(pool.submit(_write, vault, number, entry, planned, rejected))
                settle(max(1, jobs) * 4)
        if grouped is not None:
            grouped.flush()
        settle(0)
    refused += [rejected[number] for number in sorted(rejected)]
    return ImportSummary(
        written=counts["written"],
        tagged=counts["tagged"],
        unchanged=counts["unchanged"],
        quarantine_kept=kept,
        quarantine_unchanged=same,
        not_imported=refused,
        expired=expired,
    )


def _rejection(info: DocumentInfo, number: int, exc: ContentRejected) -> str:
    """How ``not_imported`` lists a document the target's scanner rejected."""
    copy = "a quarantine copy was kept" if exc.kept else "no quarantine copy was kept"
    return (
        f"{_where(info)} (line {number}: the target's scanner rejected it as {exc.category}, sha256 "
        f"{exc.sha256[:16]}; {copy}; the target's document, if any, is unchanged)"
    )


def _write(vault: Vault, number: int, entry: ExportedDocument, step: _Step, rejected: dict[int, str]) -> str:
    """Carry out one document's planned step; returns what it counts as ("rejected": not written).

    A ``replace`` first overwrites the target's document with the file's body, and only then
    forgets it (when it must drop subjects): a write that fails or is rejected leaves the old
    document as it was, never a forgotten one.
    """
    info = entry.document
    if step.action == "skip":
        return "unchanged"
    requests = _requests(info, entry.body, step.subjects)
    with _naming(info, number):
        try:
            if step.forget:
                vault.retain(requests[0])
                _forget(vault, info)
            for request in requests:
                vault.retain(request)
        except ContentRejected as exc:
            rejected[number] = _rejection(info, number, exc)
            return "rejected"
    return "tagged" if step.action == "tag" else "written"


class _Grouped:
    """Writes planned documents through :meth:`Vault.retain_many`, up to ``GROUP_SIZE`` retains per call.

    A document's retains (one per subject) go in one call unless it has more subjects than a
    call holds; the first failed retain, in file order, stops the import with its document named,
    and a document the target's scanner rejects is noted in ``rejected`` instead. A ``replace``
    that must forget (to drop subjects the file does not name) is written outside any group, as
    :func:`_write` writes it (the calls before it are sent first, so the writes keep the file's order).
    """

    def __init__(
        self, vault: Vault, counts: dict[str, int], rejected: dict[int, str], progress: Progress | None
    ) -> None:
        self.vault = vault
        self.counts = counts
        self.rejected = rejected
        self.progress = progress
        self.requests: list[RetainRequest] = []
        self.documents: list[tuple[int, DocumentInfo, str, int]] = []  # line, document, action, its retains

    def add(self, number: int, entry: ExportedDocument, step: _Step) -> None:
        info = entry.document
        if step.action == "skip":
            self._count("unchanged")
            return
        if step.forget:
            self.flush()
            self._count(_write(self.vault, number, entry, step, self.rejected))
            return
        requests = _requests(info, entry.body, step.subjects)
        if self.requests and len(self.requests) + len(requests) > GROUP_SIZE:
            self.flush()
        self.requests.extend(requests)
        self.documents.append((number, info, step.action, len(requests)))
        if len(self.requests) >= GROUP_SIZE:
            self.flush()

    def flush(self) -> None:
        """Write what is queued; raises the first failure (in file order) with its document named."""
        if not self.requests:
            return
        outcomes = self.vault.retain_many(self.requests)
        at = 0
        for number, info, action, how_many in self.documents:
            mine = outcomes[at : at + how_many]
            at += how_many
            for outcome in mine:
                if isinstance(outcome, MemvaultError) and not isinstance(outcome, ContentRejected):
                    with _naming(info, number):
                        raise outcome
            refusal = next((o for o in mine if isinstance(o, ContentRejected)), None)
            if refusal is not None:
                self.rejected[number] = _rejection(info, number, refusal)
                self._count("rejected")
            else:
                self._count("tagged" if action == "tag" else "written")
        self.requests.clear()
        self.documents.clear()

    def _count(self, outcome: str) -> None:
        if outcome in self.counts:
            self.counts[outcome] += 1
        if self.progress is not None:
            self.progress(1)


@contextlib.contextmanager
def _naming(info: DocumentInfo, number: int) -> Iterator[None]:
    """A memvault error raised inside comes out with the document and the file's line in front of
    its message, the original chained; one whose type has further fields that ``type(exc)(message)``
    cannot rebuild (``CapExceeded``, ``ContentRejected``) keeps its type and fields, its message
    prefixed the same way."""
    try:
        yield
    except MemvaultError as exc:
        message = f"importing {_where(info)} (line {number}): {exc}"
        if not _plain(exc):
            exc.args = (message, *exc.args[1:])
            raise
        raise type(exc)(message) from exc


def _plain(exc: MemvaultError) -> bool:
    """Whether ``type(exc)(message)`` rebuilds the error (types with extra fields are re-raised as they are)."""
    try:
        type(exc)("probe")
    except TypeError:
        return False
    return True


# -- verify ----------------------------------------------------------------------------


@frozen(kw_only=True)
class Mismatch:
    """One document or quarantine copy the target does not hold as the file does."""

    line: int
    what: str
    problem: str


def verify_import(
    vault: Vault, path: Path, *, progress: Progress | None = None, name: str | None = None
) -> list[Mismatch]:
    """Compare every document of the file byte for byte with the target (and its subjects, when listable).

    Lessons documents are compared too: an import leaves them out, so they
    match only once the operator copied them. ``name`` is how errors name the file.
    """
    target = _Target(vault)
    problems: list[Mismatch] = []
    for number, entry in _entries(path, name):
        if isinstance(entry, ExportedDocument):
            info = entry.document
            result = vault.read(_read_request(info))
            if result.quarantine is not None:
                problems.append(
                    Mismatch(line=number, what=_where(info), problem="the target withholds it (quarantined)")
                )
            elif info.expires_at is not None and info.expires_at <= clock.now() and not result.content:
                pass  # expired (P42): gone from the target as from the source, nothing to compare
            elif result.content.encode("utf-8") != entry.body.encode("utf-8"):
                problem = "missing" if not result.content else "its body differs"
                problems.append(Mismatch(line=number, what=_where(info), problem=problem))
            else:
                have = target.document(info)
                missing = set(info.subjects) - set(have[1] or ()) if have is not None and have[1] is not None else set()
                if missing:
                    problems.append(
                        Mismatch(line=number, what=_where(info), problem=f"lacks subjects {', '.join(sorted(missing))}")
                    )
            if progress is not None:
                progress(1)
        elif isinstance(entry, ExportedQuarantine) and target.quarantines and not target.has_copy(entry.record):
            problems.append(
                Mismatch(line=number, what=f"quarantine copy {entry.record.sha256[:16]}", problem="missing")
            )
    return problems


def count_documents(path: Path, *, name: str | None = None) -> int:
    """The number of document lines of a valid export file (checks the whole file; ``name`` as for import)."""
    return sum(1 for _number, entry in _entries(path, name) if isinstance(entry, ExportedDocument))


def supports_listing(vault: Vault) -> None:
    """:raises NotSupported: when ``vault``'s provider cannot enumerate its documents (export needs it)."""
    if not _has_hook(vault, "memvault_list_documents"):
        raise NotSupported(
            f"provider {vault.name!r} cannot enumerate its documents, so it cannot be exported: use a provider "
            "with the 'list_documents' capability"
        )
