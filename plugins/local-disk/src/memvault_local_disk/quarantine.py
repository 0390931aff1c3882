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
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs

from memvault.contract import wire
from memvault.contract.errors import InvalidRequest, UpstreamError
from memvault.contract.models import QuarantineRecord
from memvault_local_disk import fs

__all__ = ["QUARANTINE_DIR", "QuarantineFolder", "check_sha", "decode", "encode"]

QUARANTINE_DIR: Final = ".quarantine"
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_FENCE: Final = "---\n"
#: Not a record field: the subjects of later rejected writes of the same body.
_SUBJECTS: Final = "data_subject_ids"


def check_sha(value: object) -> str:
    """``value`` if it is a sha256 in hex (a copy's file name is built from it)."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise InvalidRequest(f"sha256 {str(value)[:80]!r} is not 64 lowercase hex digits", field="sha256")
    return value


def _is_copy(name: str) -> bool:
    return name.endswith(".md") and _SHA256.fullmatch(name[:-3]) is not None


def encode(record: QuarantineRecord) -> bytes:
    """The file holding ``record``."""
    fields = wire.unstructure(attrs.evolve(record, created_at=record.created_at.astimezone(dt.timezone.utc)))
    content = fields.pop("content")
    front = {"created_at": fields.pop("created_at"), **fields}
    header = "".join(f"{key}: {json.dumps(value, ensure_ascii=False)}\n" for key, value in front.items())
    return f"{_FENCE}{header}{_FENCE}{content}".encode()


def _split(raw: str) -> tuple[list[str], str] | None:
    """The frontmatter lines and the body, or ``None`` without a complete frontmatter."""
    if not raw.startswith(_FENCE):
        return None
    header, sep, content = raw[len(_FENCE) :].partition(_FENCE)
    if not sep:
        return None
    return header.splitlines(), content


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
        what = "no frontmatter" if not raw.startswith(_FENCE) else "an unterminated frontmatter"
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
        with fs.open_dir(self.root, (self.workspace,), create=create) as ws:
            if ws is None:
                yield None
                return
            if create:
                try:
                    os.mkdir(QUARANTINE_DIR, 0o700, dir_fd=ws.fd)
                except FileExistsError:
                    pass
                else:
                    os.fsync(ws.fd)
            try:
                fd = os.open(QUARANTINE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ws.fd)
            except FileNotFoundError:
                yield None
                return
            try:
                yield fs.DirHandle(fd, f"{self.workspace}/{QUARANTINE_DIR}")
            finally:
                os.close(fd)

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
        kept = [line for line in lines if not line.startswith(f"{_SUBJECTS}: ")]
        kept.append(f"{_SUBJECTS}: {json.dumps(sorted(subjects))}")
        data = (_FENCE + "".join(f"{line}\n" for line in kept) + _FENCE + content).encode("utf-8", "surrogateescape")
        fs.write_atomic(handle, name, data, mode=0o600)

    def list(self) -> list[QuarantineRecord]:
        """Every copy of the workspace, oldest first."""
        records: list[QuarantineRecord] = []
        with self.handle(create=False) as handle:
            if handle is None:
                return []
            for name in _copies(handle):
                record = self._load(handle, name)
                if record is not None:
                    records.append(record)
        records.sort(key=lambda r: r.created_at)
        return records

    def get(self, sha256: str) -> QuarantineRecord | None:
        """The copy of the body with this digest, if kept."""
        name = f"{check_sha(sha256)}.md"
        with self.handle(create=False) as handle:
            return None if handle is None else self._load(handle, name)

    @staticmethod
    def _load(handle: fs.DirHandle, name: str) -> QuarantineRecord | None:
        found = fs.read_file(handle, name)
        return None if found is None else decode(name, found[0])

    def forget_subject(self, subject: str) -> None:
        """Quarantine copies of the subject's rejected writes are derived data: erase them too (P24)."""
        with self.handle(create=False) as handle:
            if handle is None:
                return
            for name in _copies(handle):
                with fs.document_lock(handle, name):
                    found = fs.read_file(handle, name)
                    if found is None:
                        continue
                    header = found[0].decode("utf-8", errors="replace")[len(_FENCE) :].partition(_FENCE)[0]
                    if subject not in _subjects(header.splitlines()):
                        continue
                    fs.remove_file(handle, name)
                    fs.sweep_temporaries(handle, name)
                    fs.remove_file(handle, fs.lock_name(name))
                    os.fsync(handle.fd)
            # A copy whose write crashed is only a temporary, found by no look-up (P24): sweep them all.
            fs.sweep_leftovers(handle, lambda target: target)


def _copies(handle: fs.DirHandle) -> list[str]:
    with os.scandir(handle.fd) as entries:
        return sorted(e.name for e in entries if _is_copy(e.name))
