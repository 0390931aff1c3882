"""local-disk's own side of memory over time (contract P41-P45): what the files hold.

The parity suite holds the provider to the contract through the verbs; these tests
check what only files show: a crash between the document and its idempotency
key's record, processes racing one key, and a swept document leaving none of its
text in any file (its sidecars of tags, vectors and expiry included).
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memvault
from memvault.contract.clock import ManualClock, use_clock
from memvault.contract.retention import SweepRequest
from memvault_local_disk.provider import LocalDiskProvider

DAILY = {"workspace_id": "w", "agent_id": "a", "tier": "daily", "key": "2026-03-01"}


def _append(text: str, key: str = "", **extra: object) -> memvault.RetainRequest:
    return memvault.RetainRequest(**DAILY, content=text, mode="append", idempotency_key=key, **extra)  # type: ignore[arg-type]


def _read(vault: memvault.Vault) -> str:
    return vault.read(memvault.ReadRequest(**DAILY)).content  # type: ignore[arg-type]


def _files_naming(root: Path, text: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes())


#: A child process that appends with a key and dies (os._exit: no cleanup, as a kill -9 would) at ``CRASH``.
_CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys
    import memvault
    from memvault_local_disk import fs, idempotency

    root, crash = sys.argv[1], sys.argv[2]
    if crash == "before-record":  # the document is written, its key's record not yet
        idempotency.KeyFolder.put = staticmethod(lambda *a, **k: os._exit(9))
    else:  # "before-document": the journal entry is written, the document not yet
        real = fs.write_atomic
        def write_atomic(handle, name, data, **kw):
            if name == "2026-03-01.md":
                os._exit(9)
            return real(handle, name, data, **kw)
        fs.write_atomic = write_atomic
    with memvault.open("local-disk", root=root, scanner="off") as vault:
        vault.retain(memvault.RetainRequest(workspace_id="w", agent_id="a", tier="daily", key="2026-03-01",
                                            content="paid the invoice\\n", mode="append", idempotency_key="op-1"))
    """
)


@pytest.mark.parametrize("crash", ["before-record", "before-document"])
def test_a_crash_between_document_and_key_never_applies_the_repeat_twice(root: Path, crash: str) -> None:
    with memvault.open("local-disk", root=str(root), scanner="off") as vault:
        vault.retain(_append("opened the books\n"))
    env = {**os.environ, "MEMVAULT_EMBEDDER": "off"}
    done = subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(root), crash], env=env, timeout=60, check=False)
    assert done.returncode == 9  # it died where it was told to
    with memvault.open("local-disk", root=str(root), scanner="off") as vault:
        result = vault.retain(_append("paid the invoice\n", "op-1"))  # the caller's retry after the crash
        again = vault.retain(_append("paid the invoice\n", "op-1"))
        assert _read(vault) == "opened the books\npaid the invoice\n"
    assert result == again
    assert result.bytes == len(b"opened the books\npaid the invoice\n")
    assert not list(root.rglob("*.pending"))  # the journal entry was settled


def _race(root: str, barrier: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue[object]) -> None:
    os.environ["MEMVAULT_EMBEDDER"] = "off"
    with memvault.open("local-disk", root=root, scanner="off") as vault:
        barrier.wait(30)
        out.put(vault.retain(_append("one deposit\n", "deposit-7")).bytes)


def test_processes_racing_one_key_write_once(root: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    out: multiprocessing.Queue[object] = context.Queue()
    workers = [context.Process(target=_race, args=(str(root), barrier, out)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert sorted(out.get(timeout=5) for _ in workers) == [len(b"one deposit\n")] * 4
    with memvault.open("local-disk", root=str(root), scanner="off") as vault:
        assert _read(vault) == "one deposit\n"


def test_a_swept_document_leaves_no_text_in_any_file(root: Path) -> None:
    """The document, its tags, its vectors and its expiry sidecar go; and the key's record keeps no text."""
    provider = LocalDiskProvider(root)
    clock = ManualClock()
    with use_clock(clock):
        expires = clock() + dt.timedelta(hours=1)
        provider.memvault_retain(_append("card 4242 4242\n", "k1", data_subject_id="alice", expires_at=expires))
        pending = provider.memvault_vectors_pending("m", 10)
        assert provider.memvault_vectors_store("m", [(p.key, b"\x00\x00\x80\x3f" * 2) for p in pending]) == 1
        sidecars = sorted(p.name for p in (root / "w" / "agents" / "a" / "daily").iterdir() if p.name.startswith("."))
        assert ".2026-03-01.md.meta" in sidecars
        assert ".2026-03-01.md.vectors" in sidecars
        clock.advance(dt.timedelta(hours=2))
        assert provider.memvault_health().retention_overdue == 1
        swept = provider.memvault_sweep_expired(SweepRequest(now=clock()))
    assert [d.label for d in swept.documents] == ["daily/2026-03-01.md"]
    assert _files_naming(root, "4242") == []
    assert _files_naming(root, "alice") == []
    assert sorted(p.name for p in (root / "w" / "agents" / "a" / "daily").iterdir()) == []
    assert provider.memvault_health().retention_overdue == 0


def test_an_expired_document_is_absent_before_any_sweep(root: Path) -> None:
    provider = LocalDiskProvider(root)
    clock = ManualClock()
    with use_clock(clock):
        provider.memvault_retain(_append("apples in March\n", expires_at=clock() + dt.timedelta(minutes=5)))
        pins = memvault.RetainRequest(workspace_id="w", agent_id="a", tier="pins", content="apples!\n", mode="append")
        provider.memvault_retain(pins)
        recall = memvault.RecallRequest(workspace_id="w", agent_id="a", query="apples")
        assert len(provider.memvault_recall(recall).hits) == 2
        clock.advance(dt.timedelta(minutes=5))  # purge_at <= now: gone from this moment
        assert [h.source for h in provider.memvault_recall(recall).hits] == ["pins.md"]
        assert provider.memvault_read(memvault.ReadRequest(**DAILY)).content == ""  # type: ignore[arg-type]
        listed = provider.memvault_list_documents(memvault.ListDocumentsRequest(workspace_id="w")).documents
        assert [d.label for d in listed] == ["pins.md"]
        # An append starts a new document: the old text never resurfaces.
        provider.memvault_retain(_append("pears\n"))
        assert provider.memvault_read(memvault.ReadRequest(**DAILY)).content == "pears\n"  # type: ignore[arg-type]
    assert _files_naming(root, "apples in March") == []
