"""Concurrency (P12, P28) and crash safety (P11) of the local-disk provider."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import memvault
from memvault import ReadRequest, RecallRequest, RetainRequest

_WRITER = r"""
import sys
import memvault
from memvault import RetainRequest
root, agent, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with memvault.open("local-disk", root=root, scanner="off") as v:
    for n in range(count):
        v.retain(RetainRequest(workspace_id="w1", agent_id="shared", tier="daily", key="2026-01-01",
                               content=f"{agent}-{n:04d}|" + "x" * 40 + "\n", mode="append"))
"""


def _read_daily(vault: memvault.Vault, agent: str = "shared", key: str = "2026-01-01") -> str:
    return vault.read(ReadRequest(workspace_id="w1", agent_id=agent, tier="daily", key=key)).content


def test_appends_from_many_threads_lose_nothing(vault: memvault.Vault) -> None:
    """P12/P28: every append lands once, whole."""

    def worker(name: str) -> None:
        for n in range(40):
            vault.retain(
                RetainRequest(
                    workspace_id="w1",
                    agent_id="shared",
                    tier="daily",
                    key="2026-01-01",
                    content=f"{name}-{n:04d}\n",
                    mode="append",
                )
            )

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = _read_daily(vault).splitlines()
    assert sorted(lines) == sorted(f"t{i}-{n:04d}" for i in range(6) for n in range(40))


def test_appends_from_several_processes_lose_nothing(vault: memvault.Vault, root: Path) -> None:
    """P12 across OS processes: flock on the sentinel serialises whole writes."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(root), f"p{i}", "60"], stderr=subprocess.PIPE)
        for i in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    lines = _read_daily(vault).splitlines()
    assert len(lines) == 180
    assert sorted(lines) == sorted(f"p{i}-{n:04d}|" + "x" * 40 for i in range(3) for n in range(60))


def test_recall_in_another_instance_never_sees_a_torn_document(vault: memvault.Vault, root: Path) -> None:
    """Readers need no lock: rename swaps whole documents while a writer replaces in a loop."""
    stop = threading.Event()
    bodies = [f"generation {g} " + "word " * 200 + "\n" for g in range(2)]

    def writer() -> None:
        g = 0
        while not stop.is_set():
            vault.retain(
                RetainRequest(workspace_id="w1", agent_id="ada", tier="AGENT", content=bodies[g % 2], mode="replace")
            )
            g += 1

    vault.retain(RetainRequest(workspace_id="w1", agent_id="ada", tier="AGENT", content=bodies[0], mode="replace"))
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with memvault.open("local-disk", root=str(root), scanner="off") as other:
            for _ in range(150):
                body = other.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="AGENT")).content
                assert body in bodies
                hits = other.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="generation")).hits
                assert len(hits) == 1
    finally:
        stop.set()
        thread.join()


# The crash harness runs in its own single-threaded process: it imports memvault once, then forks
# each writer (cheap), so no thread of the test process can be mid-lock when a child is forked.
_CRASH_HARNESS = r"""
import json, os, random, signal, sys, time
import memvault
from memvault import RetainRequest

root, trials, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
memvault.open("local-disk", root=root, scanner="off").close()  # load the plugin registry once, before forking


def writer(agent, ack_fd):
    v = memvault.open("local-disk", root=root, scanner="off")
    # Warm up (a forked child first pays copy-on-write faults), so kills land among the timed writes.
    v.retain(RetainRequest(workspace_id="w1", agent_id=agent, tier="PERSONA", content="warm\n", mode="replace"))
    os.write(ack_fd, b"ready\n")
    n = 0
    while True:
        v.retain(RetainRequest(workspace_id="w1", agent_id=agent, tier="daily", key="2026-01-01",
                               content=f"entry-{n:05d}|{'y' * 30}\n", mode="append"))
        v.retain(RetainRequest(workspace_id="w1", agent_id=agent, tier="AGENT",
                               content=f"generation {n}\n" + "z" * (100 + n % 50) + "\n", mode="replace"))
        os.write(ack_fd, f"{n}\n".encode())
        n += 1


for trial in range(trials):
    agent = f"a{trial}"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            writer(agent, write_end)
        finally:
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        ready = pipe.readline() == b"ready\n"
        time.sleep(rng.uniform(0, 0.06))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        acked = [int(x) for x in pipe.read().split()]
    print(json.dumps({"agent": agent, "ready": ready, "acked": acked}), flush=True)
"""


_ENTRY = re.compile(r"entry-(\d{5})\|y{30}")
_AGENT = re.compile(r"generation (\d+)\nz+\n")


def test_sigkill_at_random_moments_never_loses_an_ack_or_tears_a_document(root: Path) -> None:
    """P11: 200 writers killed with SIGKILL mid-flight; acknowledged writes survive, documents are whole.

    Each trial forks a writer that appends to a daily document and replaces AGENT.md in a loop,
    reporting the number of each acknowledged pair; once it is warm the harness kills it after a
    random 0-60 ms. Then every writer's files are checked through a fresh provider instance.
    """
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_HARNESS, str(root), "200", "4"], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    trials = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(trials) == 200
    assert all(t["ready"] for t in trials)
    killed_mid_run = sum(1 for t in trials if t["acked"])
    assert killed_mid_run >= 50, f"only {killed_mid_run} of 200 writers were killed after a write was acknowledged"
    with memvault.open("local-disk", root=str(root), scanner="off") as v:
        for trial in trials:
            agent, acked = trial["agent"], trial["acked"]
            daily = _read_daily(v, agent=agent)
            entries = [int(m.group(1)) for m in map(_ENTRY.fullmatch, daily.splitlines()) if m]
            assert len(entries) == len(daily.splitlines()), f"torn daily line for {agent}: {daily[-80:]!r}"
            assert entries == list(range(len(entries)))
            if acked:
                assert len(entries) >= acked[-1] + 1, f"{agent} lost acknowledged appends"
            agent_body = v.read(ReadRequest(workspace_id="w1", agent_id=agent, tier="AGENT")).content
            if agent_body:
                m = _AGENT.fullmatch(agent_body)
                assert m, f"torn AGENT.md for {agent}: {agent_body!r}"
                if acked:
                    assert int(m.group(1)) in (acked[-1], acked[-1] + 1), f"{agent} lost an acknowledged replace"
            else:
                assert not acked, f"{agent} lost its acknowledged AGENT.md"
            if entries:
                hits = v.recall(RecallRequest(workspace_id="w1", agent_id=agent, query="entry", tier="daily")).hits
                assert {h.source for h in hits} == {"daily/2026-01-01.md"}
            folder = root / "w1/agents" / agent
            visible = {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.name.startswith(".")}
            assert visible <= {"AGENT.md", "PERSONA.md", "daily", "daily/2026-01-01.md"}
