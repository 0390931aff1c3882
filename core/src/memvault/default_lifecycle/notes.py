"""Layer 5: notes memory, numbered entries with ``save`` / ``remove`` tools over any provider (contract L14).

Storage strategy
----------------
The contract allows a notes document of up to 65536 bytes, more than any
writable tier's cap (``daily`` is the largest at 30000 bytes), and it asks
that concurrent writers be detected, never silently merged, while the provider
verbs offer no compare-and-swap. Both are solved the same way: the notes are an
**append-only operation log** in the ``daily`` tier of the notes slot's own
partition (its scope key), split into *segments*: segment ``k`` is the daily
document of the synthetic date ``1970-01-01 + k days``. When an append would
pass the daily cap, the writer moves to the next segment. The partition holds
nothing else, so these dates are never confused with a real daily log.

Each log line is one operation claiming the next version, padded with spaces
to exactly ``OP_BYTES`` (2200) bytes, so a segment either has room for the
next operation or for none: once one writer finds a segment full, no later
append can land in it, and log order stays append order::

    v7 3f2a9c0d1e2b4a5c save Prefers metric units.
    v8 9b8a7c6d5e4f3a2b remove 3

Replaying the log applies, in log order, the first operation claiming
``version + 1`` and ignores every later claim of a version already taken.
Appends are atomic and lose nothing (contract P12), so every reader, in any
process, computes the same document. A writer appends its operation, reads
the log back and checks that its own nonce won the version: if another writer
got there first, the write is retried on the new state, or, when the caller
passed ``expected_version``, rejected with :class:`NotesConflict`.

The model reads the notes together, one per line, though each sits in its own
2200-byte operation: a save or remove declares the notebook it will leave
(:func:`memvault.contract.scanning.rendered_view`), and the vault's scanner
judges that text with the append, so two notes that read as an injection side
by side are refused as one document holding both would be.

Known limit: the log is never compacted; removed and superseded entries keep
their bytes in earlier segments (a recall reads every segment).

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Mapping
from typing import Any, Final

from attrs import frozen

from memvault.contract.errors import CapExceeded, InvalidRequest, NotesConflict
from memvault.contract.lifecycle import MemoryVerbs, RecalledMessage, RecallOutcome, Tool
from memvault.contract.models import ReadRequest, RetainRequest, Tier, validate_text
from memvault.contract.scanning import rendered_view

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_ENTRY_BYTES",
    "NOTES_RECORD_ID",
    "OP_BYTES",
    "NotesChange",
    "NotesDocument",
    "NotesStore",
    "normalise_entry",
    "notes_tools",
]

MAX_ENTRY_BYTES: Final = 2048
MAX_DOCUMENT_BYTES: Final = 65536
#: The stable id of the one recalled notes message.
NOTES_RECORD_ID: Final = "notes"
_SEGMENT_ORIGIN: Final = _dt.date(1970, 1, 1)
_MAX_SEGMENTS: Final = 10_000
_RETRIES: Final = 8
#: Every log line is padded to exactly this many bytes, so a segment that has no
#: room for one operation has room for none: once any writer finds segment k
#: full, nobody can append to k again, and log order is append order.
OP_BYTES: Final = 2200


def normalise_entry(entry: object) -> str:
    """Collapse every whitespace run to one space and strip; check L14's size rule.

    :raises InvalidRequest: not real text (a lone surrogate), blank, or over 2048 bytes after normalisation.
    """
    if not isinstance(entry, str):
        raise InvalidRequest(f"a note must be a string, got {type(entry).__name__}", field="entry")
    validate_text(entry, "entry")  # a lone surrogate: InvalidRequest here, not an encoding error when stored
    text = " ".join(entry.split())
    if not text:
        raise InvalidRequest("a note must contain a non-space character", field="entry")
    size = len(text.encode("utf-8"))
    if size > MAX_ENTRY_BYTES:
        raise InvalidRequest(
            f"a note is {size} bytes after whitespace normalisation, over the limit of {MAX_ENTRY_BYTES} "
            "bytes (L14): shorten it or split it into several notes",
            field="entry",
        )
    return text


@frozen(kw_only=True)
class NotesDocument:
    """The notes at one version: entries by their stable index."""

    version: int
    entries: Mapping[int, str]
    next_index: int

    def render(self) -> str:
        """``[1] first note\\n[3] third note\\n`` (indexes keep their gaps after removals)."""
        return "".join(f"[{i}] {text}\n" for i, text in sorted(self.entries.items()))

    @property
    def size(self) -> int:
        return len(self.render().encode("utf-8"))

    def index_of(self, text: str) -> int | None:
        return next((i for i, t in self.entries.items() if t == text), None)


@frozen(kw_only=True)
class NotesChange:
    """The result of a save or remove: the version after it, the index touched, and whether it changed."""

    version: int
    index: int
    changed: bool

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "index": self.index, "changed": self.changed}


@frozen(kw_only=True)
class _Op:
    version: int
    nonce: str
    action: str
    arg: str


def _parse(body: str) -> list[_Op]:
    ops: list[_Op] = []
    for line in body.splitlines():
        parts = line.split(" ", 3)
        if len(parts) != 4 or not parts[0].startswith("v") or not parts[0][1:].isdigit():
            continue
        if parts[2] not in ("save", "remove"):
            continue
        ops.append(_Op(version=int(parts[0][1:]), nonce=parts[1], action=parts[2], arg=parts[3].rstrip(" ")))
    return ops


def _replay(ops: list[_Op]) -> tuple[NotesDocument, dict[int, str]]:
    entries: dict[int, str] = {}
    version = 0
    next_index = 1
    winners: dict[int, str] = {}
    for op in ops:
        if op.version != version + 1:
            continue  # a losing claim of a version already taken (or a gap): ignored
        if op.action == "save":
            entries[next_index] = op.arg
            next_index += 1
        else:
            if op.arg.isdigit():
                entries.pop(int(op.arg), None)
        version = op.version
        winners[version] = op.nonce
    return NotesDocument(version=version, entries=entries, next_index=next_index), winners


def _apply(doc: NotesDocument, action: str, arg: str) -> NotesDocument:
    """``doc`` after one winning operation (as :func:`_replay` applies it)."""
    entries = dict(doc.entries)
    next_index = doc.next_index
    if action == "save":
        entries[next_index] = arg
        next_index += 1
    elif arg.isdigit():
        entries.pop(int(arg), None)
    return NotesDocument(version=doc.version + 1, entries=entries, next_index=next_index)


def _op_line(version: int, nonce: str, action: str, arg: str) -> str:
    line = f"v{version} {nonce} {action} {arg}"
    padding = OP_BYTES - 1 - len(line.encode("utf-8"))
    if padding < 0:  # unreachable: entries are at most 2048 bytes
        raise InvalidRequest(f"a notes operation is over {OP_BYTES} bytes", field="entry")
    return line + " " * padding + "\n"


class NotesStore:
    """The notes of one partition (the notes slot's scope key), over any vault."""

    def __init__(self, vault: MemoryVerbs, *, workspace_id: str, agent_id: str) -> None:
        self.vault = vault
        self.workspace_id = workspace_id
        self.agent_id = agent_id

    def _key(self, segment: int) -> str:
        return (_SEGMENT_ORIGIN + _dt.timedelta(days=segment)).isoformat()

    def _read_log(self) -> tuple[list[_Op], int]:
        ops: list[_Op] = []
        segment = 0
        while segment < _MAX_SEGMENTS:
            body = self.vault.read(
                ReadRequest(
                    workspace_id=self.workspace_id, agent_id=self.agent_id, tier=Tier.DAILY, key=self._key(segment)
                )
            ).content
            if not body:
                break
            ops.extend(_parse(body))
            segment += 1
        return ops, max(segment - 1, 0)

    def load(self) -> NotesDocument:
        """The current notes."""
        return _replay(self._read_log()[0])[0]

    def _append(self, line: str, segment: int) -> None:
        while True:
            try:
                self.vault.retain(
                    RetainRequest(
                        workspace_id=self.workspace_id,
                        agent_id=self.agent_id,
                        tier=Tier.DAILY,
                        key=self._key(segment),
                        content=line,
                        mode="append",
                    )
                )
                return
            except CapExceeded:
                segment += 1  # this segment is full: the log continues in the next one

    def _commit(self, expected: int | None, plan: Any) -> NotesChange:
        for _attempt in range(_RETRIES):
            ops, last_segment = self._read_log()
            doc, _ = _replay(ops)
            if expected is not None and doc.version != expected:
                raise NotesConflict(expected=expected, actual=doc.version)
            decided = plan(doc)
            if isinstance(decided, NotesChange):
                return decided  # nothing to write (a duplicate save)
            action, arg, index = decided
            nonce = uuid.uuid4().hex[:16]
            # What the model will read once this operation wins, judged by the vault's scanner with the
            # append: a note is refused when it reads as an injection next to the others. A new note comes
            # last, so the notebook before it is a prefix (already judged, unless notes were removed since).
            before = doc.render()
            view = _apply(doc, action, arg).render()
            with rendered_view(view, extends=before if action == "save" else ""):
                self._append(_op_line(doc.version + 1, nonce, action, arg), last_segment)
            after, winners = _replay(self._read_log()[0])
            if winners.get(doc.version + 1) == nonce:
                return NotesChange(version=doc.version + 1, index=index, changed=True)
            if expected is not None:  # lost the race: rejected, never merged
                raise NotesConflict(expected=expected, actual=after.version)
        raise NotesConflict(expected=expected if expected is not None else -1, actual=self.load().version)

    def save(self, entry: str, *, expected_version: int | None = None) -> NotesChange:
        """Add a note; a duplicate (after whitespace normalisation) is a no-op (L14).

        :raises InvalidRequest: the entry or the resulting document is too large.
        :raises NotesConflict: ``expected_version`` is not the current version.
        """
        text = normalise_entry(entry)

        def plan(doc: NotesDocument) -> NotesChange | tuple[str, str, int]:
            existing = doc.index_of(text)
            if existing is not None:
                return NotesChange(version=doc.version, index=existing, changed=False)
            projected = doc.size + len(f"[{doc.next_index}] {text}\n".encode())
            if projected > MAX_DOCUMENT_BYTES:
                raise InvalidRequest(
                    f"the notes would be {projected} bytes, over the limit of {MAX_DOCUMENT_BYTES} bytes (L14): "
                    "remove notes you no longer need first",
                    field="entry",
                )
            return ("save", text, doc.next_index)

        return self._commit(expected_version, plan)

    def remove(self, index: int, *, expected_version: int | None = None) -> NotesChange:
        """Remove note ``index``; the other notes keep their indexes (L14).

        :raises InvalidRequest: there is no note with that index.
        :raises NotesConflict: ``expected_version`` is not the current version.
        """
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidRequest("index must be an integer", field="index")

        def plan(doc: NotesDocument) -> NotesChange | tuple[str, str, int]:
            if index not in doc.entries:
                known = ", ".join(str(i) for i in sorted(doc.entries)) or "none"
                raise InvalidRequest(f"there is no note [{index}]; the notes' indexes are: {known}", field="index")
            return ("remove", str(index), index)

        return self._commit(expected_version, plan)

    def recall(self) -> RecallOutcome | None:
        """The notes as one message with the stable id ``notes``; ``None`` before the first save."""
        doc = self.load()
        if doc.version == 0:
            return None
        body = doc.render() or "(no notes)\n"
        return RecallOutcome(
            messages=[RecalledMessage(id=NOTES_RECORD_ID, content=f"Notes (version {doc.version}):\n{body}")]
        )


SAVE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "entry": {"type": "string", "minLength": 1, "description": "the note (at most 2048 bytes)"},
        "expected_version": {
            "type": "integer",
            "minimum": 0,
            "description": "the notes version you last saw; the save is rejected if they changed since",
        },
    },
    "required": ["entry"],
    "additionalProperties": False,
}
REMOVE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "index": {"type": "integer", "minimum": 1, "description": "the number in brackets of the note to remove"},
        "expected_version": {"type": "integer", "minimum": 0, "description": "the notes version you last saw"},
    },
    "required": ["index"],
    "additionalProperties": False,
}


def notes_tools(store: NotesStore) -> list[Tool]:
    """``save`` and ``remove`` over ``store`` (the runtime prefixes ``<slot>__``)."""

    def save(args: Mapping[str, Any]) -> dict[str, Any]:
        return store.save(args["entry"], expected_version=args.get("expected_version")).as_dict()

    def remove(args: Mapping[str, Any]) -> dict[str, Any]:
        return store.remove(args["index"], expected_version=args.get("expected_version")).as_dict()

    return [
        Tool(
            name="save",
            description="Save a numbered note (a duplicate is ignored).",
            input_schema=SAVE_SCHEMA,
            handler=save,
        ),
        Tool(
            name="remove",
            description="Remove the note with this number; the other numbers stay.",
            input_schema=REMOVE_SCHEMA,
            handler=remove,
        ),
    ]
