"""Notes memory over the `memory` provider: numbered entries, limits, duplicates, concurrency (L14)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import memvault
from memvault.contract.errors import InvalidRequest, NotesConflict
from memvault.default_lifecycle.notes import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRY_BYTES,
    NOTES_RECORD_ID,
    OP_BYTES,
    NotesStore,
    normalise_entry,
)
from memvault.lifecycle import Runtime, Session, Slot, by_principal


@pytest.fixture
def vault() -> Iterator[memvault.Vault]:
    with memvault.open("memory") as v:
        yield v


@pytest.fixture
def store(vault: memvault.Vault) -> NotesStore:
    return NotesStore(vault, workspace_id="w", agent_id="notes-owner")


def notes_session(vault: memvault.Vault, principal: str = "alice") -> Session:
    slot = Slot(name="notes", description="Your notebook.", vault=vault, scope=by_principal, kind="notes")
    return Runtime([slot], workspace_id="w").session(f"s-{principal}", principal=principal)


def test_L14_saves_get_increasing_numbers(store: NotesStore) -> None:
    assert store.save("first").index == 1
    assert store.save("second").index == 2
    assert store.load().render() == "[1] first\n[2] second\n"


def test_L14_notes_are_recalled_as_one_message_with_a_stable_id(vault: memvault.Vault) -> None:
    session = notes_session(vault)
    start = session.turn_started(1, "hi")
    assert start.records == ()  # nothing saved yet
    assert start.tools.call("notes__save", {"entry": "Prefers metric units."}).ok
    assert start.tools.call("notes__save", {"entry": "Lives in Lyon."}).ok
    session.turn_completed(1, "ok")
    second = session.turn_started(2, "next")
    assert [(r.record_id, r.content) for r in second.records] == [
        (NOTES_RECORD_ID, "Notes (version 2):\n[1] Prefers metric units.\n[2] Lives in Lyon.\n")
    ]
    assert second.tools.call("notes__remove", {"index": 1}).ok
    session.turn_completed(2, "ok")
    session.turn_started(3, "again")
    projected = [e for e in session.projected() if e.kind == "record"]
    assert [(e.record_id, e.content) for e in projected] == [
        (NOTES_RECORD_ID, "Notes (version 3):\n[2] Lives in Lyon.\n")
    ]


def test_L14_the_notes_slot_exposes_save_and_remove(vault: memvault.Vault) -> None:
    tools = notes_session(vault).turn_started(1, "").tools
    assert tools.names == ["notes__save", "notes__remove"]
    for tool in tools.tools:
        assert tool.input_schema["additionalProperties"] is False
        assert tool.description.startswith("Your notebook.\n\n")


def test_L14_entries_are_whitespace_normalised(store: NotesStore) -> None:
    store.save("  buy \n\n milk\t now  ")
    assert store.load().entries == {1: "buy milk now"}


def test_L14_an_entry_of_2048_bytes_after_normalisation_is_accepted(store: NotesStore) -> None:
    entry = "é" * (MAX_ENTRY_BYTES // 2)
    assert store.save("  " + entry + "\n\n").changed
    assert normalise_entry("a" * 2000 + "      " + "b" * 47) == "a" * 2000 + " " + "b" * 47  # 2048 bytes


def test_L14_an_entry_over_2048_bytes_is_rejected_naming_the_rule(store: NotesStore) -> None:
    with pytest.raises(memvault.InvalidRequest, match=r"2049 bytes after whitespace normalisation.*2048.*L14"):
        store.save("a" * 2049)
    assert store.load().version == 0


def test_L14_a_blank_entry_is_rejected(store: NotesStore) -> None:
    with pytest.raises(memvault.InvalidRequest, match="non-space"):
        store.save(" \n\t ")


def test_L14_the_document_is_at_most_65536_bytes(store: NotesStore) -> None:
    entry_body = 2000
    saved = 0
    while store.load().size + 2 * (entry_body + 12) < MAX_DOCUMENT_BYTES:
        store.save(f"{saved:04d} " + "x" * entry_body)
        saved += 1
    store.save(f"{saved:04d} " + "x" * entry_body)  # still fits
    saved += 1
    with pytest.raises(memvault.InvalidRequest, match=r"over the limit of 65536 bytes \(L14\)"):
        store.save(f"{saved:04d} " + "x" * entry_body)
    doc = store.load()
    assert doc.size <= MAX_DOCUMENT_BYTES
    assert doc.size + len(f"[{doc.next_index}] ".encode()) + 5 + entry_body + 1 > MAX_DOCUMENT_BYTES
    assert len(doc.entries) == saved
    assert doc.size > 30000  # larger than any one document's tier cap: the log spans segments


def test_L14_saving_a_duplicate_is_a_no_op(store: NotesStore) -> None:
    first = store.save("call bob")
    again = store.save("  call   bob ")
    assert (again.changed, again.index, again.version) == (False, first.index, first.version)
    assert store.load().entries == {1: "call bob"}


def test_L14_indexes_are_stable_across_removals(store: NotesStore) -> None:
    for text in ("one", "two", "three"):
        store.save(text)
    store.remove(2)
    assert store.save("four").index == 4
    assert store.load().entries == {1: "one", 3: "three", 4: "four"}
    store.remove(4)
    assert store.save("five").index == 5  # a removed number is never reused


def test_L14_removing_a_missing_index_is_an_error_listing_the_indexes(store: NotesStore) -> None:
    store.save("one")
    with pytest.raises(memvault.InvalidRequest, match=r"no note \[7\].*: 1"):
        store.remove(7)


def test_L14_a_stale_expected_version_is_a_conflict(store: NotesStore, vault: memvault.Vault) -> None:
    other = NotesStore(vault, workspace_id="w", agent_id="notes-owner")
    seen = store.load().version
    other.save("written elsewhere")
    with pytest.raises(NotesConflict) as info:
        store.save("mine", expected_version=seen)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert store.load().entries == {1: "written elsewhere"}  # rejected, never merged


def test_L14_a_matching_expected_version_succeeds(store: NotesStore) -> None:
    store.save("a")
    assert store.save("b", expected_version=1).version == 2
    assert store.remove(1, expected_version=2).version == 3


def test_L14_a_conflict_through_the_tool_is_an_error_result(vault: memvault.Vault) -> None:
    tools = notes_session(vault).turn_started(1, "").tools
    assert tools.call("notes__save", {"entry": "a", "expected_version": 0}).ok
    result = tools.call("notes__save", {"entry": "b", "expected_version": 0})
    assert (result.ok, result.error) == (False, "NotesConflict")


def test_L14_concurrent_writers_with_one_expected_version_one_wins_the_rest_are_rejected(
    vault: memvault.Vault,
) -> None:
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def write(n: int) -> None:
        mine = NotesStore(vault, workspace_id="w", agent_id="race")
        barrier.wait()
        try:
            mine.save(f"writer {n}", expected_version=0)
            outcomes.append("ok")
        except NotesConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = NotesStore(vault, workspace_id="w", agent_id="race").load()
    assert outcomes.count("ok") == 1
    assert outcomes.count("conflict") == 5
    assert doc.version == 1
    assert len(doc.entries) == 1


def test_L14_concurrent_writers_without_expected_version_are_retried_and_lose_nothing(vault: memvault.Vault) -> None:
    barrier = threading.Barrier(6)

    def write(n: int) -> None:
        mine = NotesStore(vault, workspace_id="w", agent_id="retry")
        barrier.wait()
        for k in range(3):
            mine.save(f"writer {n} note {k}")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = NotesStore(vault, workspace_id="w", agent_id="retry").load()
    assert sorted(doc.entries.values()) == sorted(f"writer {n} note {k}" for n in range(6) for k in range(3))
    assert sorted(doc.entries) == list(range(1, 19))
    assert doc.version == 18


def test_L14_notes_of_two_principals_never_mix(vault: memvault.Vault) -> None:
    alice = notes_session(vault, "alice").turn_started(1, "").tools
    bob_session = notes_session(vault, "bob")
    assert alice.call("notes__save", {"entry": "alice's secret"}).ok
    assert bob_session.turn_started(1, "").records == ()


def test_L14_log_segments_fill_with_equal_size_operations_so_a_full_segment_stays_sealed(
    store: NotesStore, vault: memvault.Vault
) -> None:
    for n in range(14):
        store.save(f"note {n}")

    def segment(day: str) -> list[bytes]:
        body = vault.read(memvault.ReadRequest(workspace_id="w", agent_id="notes-owner", tier="daily", key=day)).content
        return body.encode().splitlines(keepends=True)

    first, second = segment("1970-01-01"), segment("1970-01-02")
    per_segment = 30000 // OP_BYTES
    assert (len(first), len(second)) == (per_segment, 14 - per_segment)
    assert {len(line) for line in first + second} == {OP_BYTES}
    assert store.load().entries == {n + 1: f"note {n}" for n in range(14)}


def test_L14_a_note_that_is_not_real_text_is_invalid_request(store: NotesStore) -> None:
    # A lone surrogate failed when the operation line was encoded: an untyped ToolError for the model.
    with pytest.raises(InvalidRequest, match="lone surrogate"):
        store.save("hi \ud800")
    assert store.load().entries == {}
