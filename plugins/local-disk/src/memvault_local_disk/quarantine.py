"""Quarantine copies (P30): ``<root>/<workspace>/.quarantine/<sha256>.md``, mode 0600.

A copy is the rejected body behind a frontmatter of ``key: json-value`` lines, one
per field of :class:`memvault.contract.models.QuarantineRecord` (``created_at`` first, in UTC)::

    ---
    created_at: "2026-01-31T09:00:00+00:00"
    workspace_id: "w1"
    ...
    data_subject_id: "user-7"
    ---
    <the rejected body>

The fields go through memvault's one converter (:mod:`memvault.contract.wire`), so the
file and the record cannot disagree on a field. One copy is kept per body; a
later rejected write of the same body by another data subject adds a line
``data_subject_ids: [...]`` (every subject whose write the copy holds), so an
erasure of any of them removes it (P24).

A line ends at ``"\\n"`` and nowhere else (a ``"\\r"`` before it is dropped). Values are
written with every other character :meth:`str.splitlines` breaks at (U+0085, U+2028,
U+2029; JSON already escapes the control characters) as a ``\\uXXXX`` escape, so no
reader, editor or tool splitting lines any way finds a line break inside a value.
Copies written before that escaping (raw U+2028 inside a JSON string) read the same.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import warnings
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Final

import attrs

from memvault.contract import wire
from memvault.contract.errors import InvalidRequest, SkippedUnreadable, UpstreamError
from memvault.contract.models import QuarantineRecord
from memvault_local_disk import fs

__all__ = ["QUARANTINE_DIR", "QuarantineFolder", "check_sha", "decode", "encode"]

QUARANTINE_DIR: Final = ".quarantine"
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_FENCE: Final = "---\n"
#: Not a record field: the subjects of later rejected writes of the same body.
_SUBJECTS: Final = "data_subject_ids"
#: The line breaks of :meth:`str.splitlines` that ``json.dumps(ensure_ascii=False)`` leaves raw.
_RAW_BREAKS: Final = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


def check_sha(value: object) -> str:
    """``value`` if it is a sha256 in hex (a copy's file name is built from it)."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise InvalidRequest(f"sha256 {str(value)[:80]!r} is not 64 lowercase hex digits", field="sha256")
    return value


def _is_copy(name: str) -> bool:
    return name.endswith(".md") and _SHA256.fullmatch(name[:-3]) is not None


def _line(key: str, value: Any) -> str:
    """One frontmatter line, ``"\\n"`` included: no line break of any kind inside it."""
    # The escapes only ever land inside JSON strings (the only place these characters can be).
    return f"{key}: {json.dumps(value, ensure_ascii=False).translate(_RAW_BREAKS)}\n"


def encode(record: QuarantineRecord) -> bytes:
    """The file holding ``record``."""
    fields = wire.unstructure(attrs.evolve(record, created_at=record.created_at.astimezone(dt.timezone.utc)))
    content = fields.pop("content")
    front = {"created_at": fields.pop("created_at"), **fields}
    header = "".join(_line(key, value) for key, value in front.items())
    return f"{_FENCE}{header}{_FENCE}{content}".encode()


def _lines(text: str) -> list[str]:
    """The lines of ``text``: split at ``"\\n"`` only, as they are written (``"\\r\\n"`` tolerated).

    Not :meth:`str.splitlines`: it also breaks at U+2028 and the like, which a copy written
    before they were escaped holds raw inside a JSON string.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _opens(raw: str) -> bool:
    return raw.startswith((_FENCE, "---\r\n"))


def _split(raw: str) -> tuple[list[str], str] | None:
    """The frontmatter lines and the body, or ``None`` without a complete frontmatter.

    The frontmatter runs from a first line ``---`` to the next line ``---`` (lines as :func:`_lines`).
    """
    if not _opens(raw):
        return None
    lines: list[str] = []
    start = raw.index("\n") + 1
    while True:
        end = raw.find("\n", start)
        if end < 0:
            return None
        line = raw[start:end].removesuffix("\r")
        if line == "---":
            return lines, raw[end + 1 :]
        lines.append(line)
        start = end + 1


def _field(line: str) -> tuple[str, Any]:
    """One ``key: json-value`` line. :raises ValueError: when the value is not JSON."""
    key, _, value = line.partition(": ")
    return key, json.loads(value)


def decode(name: str, data: bytes) -> QuarantineRecord:
    """The record in copy ``name``.

    :raises UpstreamError: when the file is not a copy this provider wrote (edited by hand).
    """
    raw = data.decode("utf-8", errors="replace")
    split = _split(raw)
    if split is None:
        what = "an unterminated frontmatter" if _opens(raw) else "no frontmatter"
        raise UpstreamError(f"quarantine copy {name!r} has {what}: it was edited by hand")
    lines, content = split
    fields: dict[str, Any] = {}
    for line in lines:
        try:
            key, value = _field(line)
        except ValueError as exc:
            raise UpstreamError(f"quarantine copy {name!r} has a malformed frontmatter line {line[:80]!r}") from exc
        fields[key] = value
    fields.pop(_SUBJECTS, None)
    fields["content"] = content
    try:
        return wire.structure(fields, QuarantineRecord, what=f"quarantine copy {name!r}")
    except InvalidRequest as exc:
        raise UpstreamError(f"quarantine copy {name!r} is not a quarantine record: {exc}") from exc


def _rewritten(line: str) -> str:
    """A frontmatter line kept by a rewrite, ``"\\n"`` included: a value an older release wrote with
    a raw line break (U+2028) is escaped now; a line that is not ``key: json`` stays as it is."""
    try:
        key, value = _field(line)
    except ValueError:
        return f"{line}\n"
    return _line(key, value)


def _subjects(lines: list[str]) -> set[str]:
    """Every subject whose rejected write a copy holds (exact strings); unreadable lines name none."""
    subjects: set[str] = set()
    for line in lines:
        try:
            key, value = _field(line)
            if key == "data_subject_id":
                subjects.add(str(value))
            elif key == _SUBJECTS:
                subjects.update(str(v) for v in value)
        except (ValueError, TypeError):
            continue
    subjects.discard("")
    return subjects


class QuarantineFolder:
    """The ``.quarantine`` folder of one workspace (a fixed, provider-owned dot name).

    ``OSError`` is raised as is; the provider's caller translates it.
    """

    def __init__(self, root: Path, workspace: str) -> None:
        self.root = root
        self.workspace = workspace

    @contextlib.contextmanager
    def handle(self, *, create: bool) -> Iterator[fs.DirHandle | None]:
        with fs.open_private_dir(self.root, self.workspace, QUARANTINE_DIR, create=create) as handle:
            yield handle

    def keep(self, record: QuarantineRecord) -> None:
        """Keep the first copy of a body; a later one by another subject adds that subject to it."""
        name = f"{check_sha(record.sha256)}.md"
        data = encode(record)
        with self.handle(create=True) as handle:
            assert handle is not None
            with fs.document_lock(handle, name):
                if fs.lstat(handle, name) is None:  # the first copy of a body is kept, like the memory provider
                    fs.write_atomic(handle, name, data, mode=0o600)
                elif record.data_subject_id:
                    self._add_subject(handle, name, record.data_subject_id)

    @staticmethod
    def _add_subject(handle: fs.DirHandle, name: str, subject: str) -> None:
        """The kept copy is also the copy of this subject's write: erasing either subject removes it (P24)."""
        found = fs.read_file(handle, name)
        if found is None:
            return
        split = _split(found[0].decode("utf-8", errors="surrogateescape"))
        if split is None:
            return
        lines, content = split
        subjects = _subjects(lines)
        if subject in subjects:
            return
        subjects.add(subject)
        kept = [_rewritten(line) for line in lines if not line.startswith(f"{_SUBJECTS}: ")]
        kept.append(_line(_SUBJECTS, sorted(subjects)))
        data = (_FENCE + "".join(kept) + _FENCE + content).encode("utf-8", "surrogateescape")
        fs.write_atomic(handle, name, data, mode=0o600)

    def list(self) -> list[QuarantineRecord]:
        """Every copy of the workspace, oldest first.

        A copy that is not a record (edited by hand) is skipped with a
        :class:`~memvault.errors.SkippedUnreadable` warning naming its file: one broken
        copy never hides the others (an erasure reads every copy its own way).
        """
        records: list[QuarantineRecord] = []
        with self.handle(create=False) as handle:
            if handle is None:
                return []
            for name in _copies(handle):
                try:
                    record = self._load(handle, name)
                except UpstreamError as exc:
                    path = self.root / self.workspace / QUARANTINE_DIR / name
                    warnings.warn(
                        SkippedUnreadable(
                            f"{exc}; move {path} out of the quarantine folder (an erasure still reads it), "
                            "or restore it from a backup",
                            where=str(path),
                        ),
                        stacklevel=2,
                    )
                    continue
                if record is not None:
                    records.append(record)
        records.sort(key=lambda r: r.created_at)
        return records

    def get(self, sha256: str) -> QuarantineRecord | None:
        """The copy of the body with this digest, if kept."""
        name = f"{check_sha(sha256)}.md"
        with self.handle(create=False) as handle:
            return None if handle is None else self._load(handle, name)

    def remove(self, sha256: str) -> bool:
        """Remove the copy of the body with this digest, its crash leftovers and its lock; whether it existed."""
        name = f"{check_sha(sha256)}.md"
        with self.handle(create=False) as handle:
            if handle is None:
                return False
            with fs.document_lock(handle, name):
                removed = fs.remove_file(handle, name)
                fs.sweep_temporaries(handle, name)
                fs.remove_file(handle, fs.lock_name(name))
            os.fsync(handle.fd)
        return removed

    @staticmethod
    def _load(handle: fs.DirHandle, name: str) -> QuarantineRecord | None:
        found = fs.read_file(handle, name)
        return None if found is None else decode(name, found[0])

    def forget_subject(
        self,
        subject: str,
        unfinished: fs.Unfinished,
        documents: AbstractSet[tuple[str, str, str]] = frozenset(),
    ) -> None:
        """Quarantine copies of the subject's rejected writes are derived data: erase them too (P24), and
        so are copies of rejected appends to the ``documents`` the erasure removes (``(agent_id, crew_id,
        label)``): a copy is the final body, so it holds the document's text, whoever wrote it.

        A copy (or the folder) that cannot be handled is noted in ``unfinished``; the others still go.
        """
        folder = f"{self.workspace}/{QUARANTINE_DIR}"
        with unfinished.attempt(folder), self.handle(create=False) as handle:
            if handle is None:
                return
            for name in _copies(handle):
                with unfinished.attempt(f"{folder}/{name}", folder=folder), fs.document_lock(handle, name):
                    found = fs.read_file(handle, name)
                    if found is None:
                        continue
                    raw = found[0].decode("utf-8", errors="replace")
                    split = _split(raw)  # a copy broken by hand: every line that names a subject counts
                    if subject not in _subjects(split[0] if split is not None else _lines(raw)) and (
                        not documents or _names(name, found[0]) not in documents
                    ):
                        continue
                    fs.remove_file(handle, name)
                    fs.sweep_temporaries(handle, name)
                    fs.remove_file(handle, fs.lock_name(name))
                    os.fsync(handle.fd)
            # A copy whose write crashed is only a temporary, found by no look-up (P24): sweep them all.
            with unfinished.attempt(folder, folder=folder):
                fs.sweep_leftovers(handle, lambda target: target)


def _names(name: str, data: bytes) -> tuple[str, str, str] | None:
    """``(agent_id, crew_id, label)`` of the document a copy was written for; ``None`` when unreadable."""
    try:
        record = decode(name, data)
    except UpstreamError:
        return None
    return (record.agent_id, record.crew_id, record.label)


def _copies(handle: fs.DirHandle) -> list[str]:
    with os.scandir(handle.fd) as entries:
        return sorted(e.name for e in entries if _is_copy(e.name))
