"""A document lock held by one part of the process survives every other part opening and closing files.

POSIX ``fcntl``/``lockf`` locks belong to the process and the file: closing
*any* descriptor of the file drops them (the bug SQLite's docs call "closing a
file descriptor drops locks"). local-disk serialises writers with ``flock`` on a
sentinel file; ``flock`` locks belong to the open file description, so only
closing the descriptor that took the lock releases it. These tests hold a
document's lock in one thread and, while it is held, let a second vault of the
same process read, recall, health-check, erase by subject and open/close the
sentinel, the tag and the document directly; another process must still find
the lock taken, and a writer in another process must wait for it (P12).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import memvault
from memvault import ForgetRequest, ReadRequest, RecallRequest, RetainRequest
from memvault_local_disk import fs

PROBE = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("held")
    else:
        print("free")
    """
)

WRITER = textwrap.dedent(
    """
    import sys, time
    import memvault
    with memvault.open("local-disk", root=sys.argv[1], scanner="off") as vault:
        print("start", flush=True)
        vault.retain(memvault.RetainRequest(
            workspace_id="w1", agent_id="ada", tier="pins", content="from the other process\\n", mode="append"))
        print("done", flush=True)
    """
)


def probe(sentinel: Path) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE, str(sentinel)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_held_document_lock_survives_other_descriptors_of_the_process(root: Path) -> None:
    folder = root / "w1/agents/ada"
    with memvault.open("local-disk", root=str(root), scanner="off") as first:
        first.retain(
            RetainRequest(
                workspace_id="w1",
                agent_id="ada",
                tier="pins",
                content="tagged\n",
                mode="append",
                data_subject_id="user-1",
            )
        )
    sentinel = folder / fs.lock_name("pins.md")
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with fs.open_dir(root, ("w1", "agents", "ada"), create=False) as handle:
            assert handle is not None
            with fs.document_lock(handle, "pins.md"):
                held.set()
                release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    writer = None
    try:
        assert held.wait(10)
        assert probe(sentinel) == "held"
        with memvault.open("local-disk", root=str(root), scanner="off") as second:
            second.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins"))
            second.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="tagged"))
            assert second.health().ok
            assert second.forget(ForgetRequest(workspace_id="w1", data_subject_id="user-2")).removed == 0
            second.plugin_manager.hook.memvault_quarantine_list(workspace_id="w1")
        for name in (fs.lock_name("pins.md"), ".pins.md.subject", "pins.md"):
            os.close(os.open(folder / name, os.O_RDONLY))
        assert probe(sentinel) == "held"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "start"
        # The other process is blocked on the lock: its write cannot be there yet.
        with memvault.open("local-disk", root=str(root), scanner="off") as third:
            assert third.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins")).content == "tagged\n"
    finally:
        release.set()
        holder.join(10)
    assert writer is not None
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert out.strip() == "done"
    assert probe(sentinel) == "free"
    with memvault.open("local-disk", root=str(root), scanner="off") as vault:
        body = vault.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins")).content
    assert body == "tagged\nfrom the other process\n"
