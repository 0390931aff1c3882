"""Threads, processes and crashes (P11, P12, P20, P28)."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

import memvault
from memvault.contract.models import Capability
from memvault_parity.base import SuiteBase, child_env, requires

__all__ = ["ConcurrencyTests", "CrashTests", "ForgetRaceTests", "MultiProcessTests"]

_THREADS = 8
_PER_THREAD = 25
_TOKEN = re.compile(r"<t(\d+)-(\d+)>")


def _assert_whole_tokens(body: str, writers: int, per_writer: int, prefix: str = "t") -> None:
    """Every token exactly once, and the body is nothing but whole tokens."""
    pattern = re.compile(rf"<{prefix}(\d+)-(\d+)>")
    tokens = pattern.findall(body)
    expected = {(str(w), str(k)) for w in range(writers) for k in range(per_writer)}
    assert len(tokens) == len(expected), f"P12: {len(expected) - len(set(tokens))} appends lost or duplicated"
    assert set(tokens) == expected
    assert pattern.sub("", body) == "", "P12: a write was torn or interleaved mid-way"
    # each writer's own appends stay in the order it made them
    for w in range(writers):
        mine = [int(k) for ww, k in tokens if ww == str(w)]
        assert mine == sorted(mine)


class ConcurrencyTests(SuiteBase):
    """Every verb is thread-safe (P12, P28)."""

    def test_concurrent_appends_from_threads_lose_nothing(self, vault: memvault.Vault, ws: str) -> None:
        """P12: 8 threads x 25 appends to one document: every append is in the body exactly once, whole."""
        barrier = threading.Barrier(_THREADS)

        def writer(w: int) -> None:
            barrier.wait(timeout=10)
            for k in range(_PER_THREAD):
                self.put(vault, ws, f"<t{w}-{k}>", tier="pins")

        _run_threads(writer, _THREADS)
        _assert_whole_tokens(self.body(vault, ws, tier="pins"), _THREADS, _PER_THREAD)

    def test_concurrent_appends_report_growing_sizes(self, vault: memvault.Vault, ws: str) -> None:
        """P12/P10: each acknowledged append's bytes is a distinct size of the growing body."""
        sizes: list[int] = []
        lock = threading.Lock()

        def writer(w: int) -> None:
            for k in range(10):
                result = self.put(vault, ws, f"<t{w}-{k}>", tier="daily", key="2026-08-08")
                with lock:
                    sizes.append(result.bytes)

        _run_threads(writer, 4)
        assert len(set(sizes)) == len(sizes) == 40
        assert max(sizes) == len(self.body(vault, ws, tier="daily", key="2026-08-08").encode())

    def test_every_verb_is_safe_from_many_threads(self, vault: memvault.Vault, ws: str) -> None:
        """P28: 8 threads call retain/recall/read/forget/health at once on one partition's documents;
        nothing raises and each thread sees exactly its own writes."""
        barrier = threading.Barrier(8)

        def worker(i: int) -> None:
            peer = f"peer{i}"
            barrier.wait(timeout=10)
            for k in range(15):
                self.put(vault, ws, f"thread{i} note{k}\n", tier="peers", key=peer)
                hits = self.find(vault, ws, f"thread{i}", tier="peers", settled=False)
                assert len(hits) == k + 1
                assert {h.source for h in hits} == {f"peers/{peer}.md"}
                assert self.body(vault, ws, tier="peers", key=peer).count("\n") == k + 1
                vault.health()
            assert self.drop(vault, ws, label=f"peers/{peer}.md") == 1
            assert self.body(vault, ws, tier="peers", key=peer) == ""

        _run_threads(worker, 8)

    def test_provider_errors_are_memvault_errors(self, vault: memvault.Vault, ws: str) -> None:
        """P28: a refused write surfaces as a memvault.errors type, not a library exception."""
        with pytest.raises(memvault.MemvaultError) as caught:
            self.put(vault, ws, "z" * 4001)
        assert isinstance(caught.value, memvault.CapExceeded)


class MultiProcessTests(SuiteBase):
    """Several OS processes on one store (P12, P20): only for the multi_process capability."""

    @requires(Capability.MULTI_PROCESS)
    def test_write_in_another_process_is_visible_here(
        self, vault: memvault.Vault, ws: str, settings: Mapping[str, Any]
    ) -> None:
        """P20: a retain acknowledged by another process is recalled and read here."""
        code = (
            "vault.retain(memvault.RetainRequest(workspace_id=ARGS[0], agent_id='agent-1', tier='AGENT',"
            " content='written by child capybara\\n', mode='append'))\nprint('ok', flush=True)\n"
        )
        done = self.child(settings, code, ws)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "ok"
        assert [h.line for h in self.find(vault, ws, "capybara")] == [1]
        assert self.body(vault, ws) == "written by child capybara\n"

    @requires(Capability.MULTI_PROCESS)
    def test_write_here_is_visible_in_another_process(
        self, vault: memvault.Vault, ws: str, settings: Mapping[str, Any]
    ) -> None:
        """P20: after retain returns here, another process recalls it."""
        self.put(vault, ws, "written by parent axolotl\n")
        code = (
            "r = vault.recall(memvault.RecallRequest(workspace_id=ARGS[0], agent_id='agent-1', query='axolotl'))\n"
            "print(len(r.hits), flush=True)\n"
        )
        done = self.child(settings, code, ws)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "1"

    @requires(Capability.MULTI_PROCESS)
    def test_concurrent_appends_from_processes_lose_nothing(
        self, ws: str, settings: Mapping[str, Any], open_vault: Callable[[], memvault.Vault]
    ) -> None:
        """P12: 3 processes x 20 appends to one document: nothing lost, whole writes only."""
        code = (
            "import time\n"
            "start = float(ARGS[2])\n"
            "time.sleep(max(0.0, start - time.time()))\n"
            "for k in range(20):\n"
            "    vault.retain(memvault.RetainRequest(workspace_id=ARGS[0], agent_id='agent-1', tier='pins',"
            " content=f'<p{ARGS[1]}-{k}>', mode='append'))\n"
        )
        start = time.time() + 1.5
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    self.child_script(code),
                    self._provider_name(),
                    _json(settings),
                    ws,
                    str(w),
                    str(start),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
            )
            for w in range(3)
        ]
        try:
            for proc in procs:
                _out, err = proc.communicate(timeout=60)
                assert proc.returncode == 0, err
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        _assert_whole_tokens(self.body(open_vault(), ws, tier="pins"), 3, 20, prefix="p")


class CrashTests(SuiteBase):
    """Acknowledged writes survive kill -9 (P11): only for the durable capability."""

    @requires(Capability.DURABLE)
    def test_acknowledged_writes_survive_kill_9(
        self, ws: str, settings: Mapping[str, Any], open_vault: Callable[[], memvault.Vault]
    ) -> None:
        """P11: a writer prints each id after retain returns; after SIGKILL every printed write is there."""
        if sys.platform == "win32":  # pragma: no cover - SIGKILL is POSIX
            pytest.skip("kill -9 is POSIX only")
        code = (
            "i = 0\n"
            "while True:\n"
            "    vault.retain(memvault.RetainRequest(workspace_id=ARGS[0], agent_id='agent-1', tier='peers',"
            " key=f'd{i}', content=f'durable entry {i}\\n', mode='replace'))\n"
            "    print(i, flush=True)\n"
            "    i += 1\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", self.child_script(code), self._provider_name(), _json(settings), ws],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        lines: queue.Queue[str] = queue.Queue()
        acknowledged: list[int] = []
        try:
            assert proc.stdout is not None
            stdout = proc.stdout

            def pump() -> None:
                for line in stdout:
                    lines.put(line)

            threading.Thread(target=pump, daemon=True).start()
            deadline = time.monotonic() + 30
            while len(acknowledged) < 25 and time.monotonic() < deadline and proc.poll() is None:
                try:
                    acknowledged.append(int(lines.get(timeout=max(0.01, deadline - time.monotonic()))))
                except queue.Empty:
                    break
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            assert proc.stderr is not None
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        time.sleep(0.2)  # let the reader thread drain what the writer printed before it died
        while not lines.empty():
            line = lines.get_nowait()
            if line.strip().isdigit():
                acknowledged.append(int(line))
        assert acknowledged, f"the writer acknowledged nothing: {err[-2000:]}"
        vault = open_vault()
        for i in acknowledged:
            assert self.body(vault, ws, tier="peers", key=f"d{i}") == f"durable entry {i}\n", f"P11: write {i} lost"

    @requires(Capability.DURABLE)
    def test_writes_survive_closing_and_reopening(self, ws: str, open_vault: Callable[[], memvault.Vault]) -> None:
        """P11: a store reopened on the same settings holds what the closed one acknowledged."""
        first = open_vault()
        self.put(first, ws, "persisted marmot\n")
        first.close()
        second = open_vault()
        assert self.body(second, ws) == "persisted marmot\n"
        assert [h.line for h in self.find(second, ws, "marmot")] == [1]


def _run_threads(target: Callable[[int], None], count: int, timeout: float = 60.0) -> None:
    """Run ``target(0..count-1)`` in threads; re-raise the first error; fail if one hangs."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised in the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"P28: a call did not return within {timeout:.0f} s"
    if errors:
        raise errors[0]


def _json(settings: Mapping[str, Any]) -> str:
    import json

    return json.dumps(dict(settings))


class ForgetRaceTests(SuiteBase):
    """forget of one document from two threads at once (P23, P28)."""

    def test_forgetting_one_document_from_two_threads_removes_it_once(self, vault: memvault.Vault, ws: str) -> None:
        """P23/P28: two threads forget the same document at the same moment, 12 times over: each time one
        gets removed=1 and the other removed=0 (a check-then-delete outside a lock counts it twice)."""
        for round_ in range(12):
            label = f"peers/race{round_}.md"
            self.put(vault, ws, f"racing line {round_}\n", tier="peers", key=f"race{round_}")
            barrier = threading.Barrier(2)
            removed: list[int] = []

            def forget(
                _: int, label: str = label, barrier: threading.Barrier = barrier, removed: list[int] = removed
            ) -> None:
                barrier.wait(timeout=10)
                removed.append(self.drop(vault, ws, label=label))

            _run_threads(forget, 2)
            assert sorted(removed) == [0, 1], f"round {round_}: removed {removed}"
            assert self.body(vault, ws, tier="peers", key=f"race{round_}") == ""
