"""health: ok, message, checked_at, deadline, and no trace (P25, P26, P27)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import memvault
from memvault.contract.models import Capability
from memvault_parity.base import SuiteBase

__all__ = ["HealthTests"]


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


class HealthTests(SuiteBase):
    """health reports, never raises, and answers in time."""

    def test_health_of_a_fresh_store_is_ok_with_an_empty_message(self, vault: memvault.Vault) -> None:
        """P25: a working provider reports ok=True and message=""."""
        status = vault.health()
        assert (status.ok, status.message) == (True, "")

    def test_health_checked_at_is_timezone_aware_utc_now(self, vault: memvault.Vault) -> None:
        """P25: checked_at is set, aware, UTC, and current."""
        before = dt.datetime.now(dt.timezone.utc)
        status = vault.health()
        after = dt.datetime.now(dt.timezone.utc)
        assert status.checked_at.utcoffset() == dt.timedelta(0)
        assert before - dt.timedelta(seconds=5) <= status.checked_at <= after + dt.timedelta(seconds=5)

    def test_health_answers_within_its_deadline(
        self, vault: memvault.Vault, provider_capabilities: frozenset[str]
    ) -> None:
        """P26: 200 ms for a local provider, 1000 ms for a remote one: the median of 7 probes is under the
        deadline and at most 2 probes (a busy machine) hit the vault's "health check timeout"."""
        deadline = 1.0 if Capability.REMOTE in provider_capabilities else 0.2
        vault.health()  # first call may warm a connection
        timings, timeouts = [], 0
        for _ in range(7):
            start = time.perf_counter()
            status = vault.health()
            timings.append(time.perf_counter() - start)
            if status.message == "health check timeout":
                timeouts += 1
            else:
                assert status.ok, status.message
        assert sorted(timings)[3] < deadline
        assert timeouts <= 2

    def test_health_after_writes_stays_ok(self, vault: memvault.Vault, ws: str) -> None:
        """P25: health is ok on a store that holds data, repeatedly."""
        self.put(vault, ws, "some data\n")
        assert all(vault.health().ok for _ in range(3))

    def test_health_probe_leaves_nothing_behind(self, vault: memvault.Vault, ws: str, tmp_path: Path) -> None:
        """P27: probing creates no file under the store and no document the caller can see."""
        self.put(vault, ws, "baseline\n")
        before = _snapshot(tmp_path)
        for _ in range(3):
            assert vault.health().ok
        assert _snapshot(tmp_path) == before
        assert self.body(vault, ws) == "baseline\n"
        assert [h.source for h in self.find(vault, ws, "health probe check test ok")] == []

    def test_health_is_ok_while_other_calls_run(self, vault: memvault.Vault, ws: str) -> None:
        """P25/P28: a busy provider is a healthy one: while 3 threads retain, recall, read and forget, every
        probe that answers in time says ok (at most 2 of 10 may hit the vault's "health check timeout")."""
        stop = threading.Event()
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                n = 0
                while not stop.is_set():
                    self.put(vault, ws, f"busy {n} " + "word " * 250 + "\n", tier="daily", key=f"2026-01-0{i + 1}")
                    self.find(vault, ws, "busy word", tier="daily")
                    self.body(vault, ws, tier="daily", key=f"2026-01-0{i + 1}")
                    n += 1
                    if n % 5 == 0:
                        self.drop(vault, ws, label=f"daily/2026-01-0{i + 1}.md")
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.05)
            probes = []
            for _ in range(10):
                probes.append(vault.health())
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert not errors, errors[0]
        failed = [p.message for p in probes if not p.ok and p.message != "health check timeout"]
        assert failed == []
        assert sum(p.ok for p in probes) >= 8

    def test_health_stays_ok_under_ordinary_load_sampled_many_times(self, vault: memvault.Vault, ws: str) -> None:
        """P25/P28: health says whether the store works, not whether a call is running: while two threads
        retain and recall small documents, as an agent does, 120 probes taken 5 ms apart all say ok (a probe
        the vault gave up on, "health check timeout", is the machine's doing: at most 5 are let through)."""
        stop = threading.Event()
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                n = 0
                while not stop.is_set() and n < 20_000:
                    self.put(vault, ws, f"note {n} about the garden\n", tier="peers", key=f"peer-{i}", mode="append")
                    self.find(vault, ws, "garden note", tier="peers")
                    n += 1
                    if n % 40 == 0:  # under the peers cap (1500 bytes)
                        self.drop(vault, ws, label=f"peers/peer-{i}.md")
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        probes = []
        try:
            time.sleep(0.02)
            for _ in range(120):
                probes.append(vault.health())
                time.sleep(0.005)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert not errors, errors[0]
        flapped = [p.message for p in probes if not p.ok and p.message != "health check timeout"]
        assert flapped == [], (
            f"{len(flapped)} of 120 probes said not ok under ordinary load: {flapped[:3]} (a probe that gives up "
            "on the store's lock after a fixed wait reports a busy store as failing when a call is slow to finish; "
            "ask how long the holder has held it instead: memvault.contract.locks.HeldLock)"
        )
        assert sum(p.ok for p in probes) >= 115

    def test_concurrent_health_checks_each_say_ok(self, vault: memvault.Vault) -> None:
        """P25/P28: health is a verb like the others, safe from many threads at once (a load balancer and a
        monitor probe the same process): 6 threads probing 15 times each all get ok."""
        barrier = threading.Barrier(6)
        results: list[memvault.HealthStatus] = []
        errors: list[BaseException] = []
        guard = threading.Lock()

        def probe() -> None:
            try:
                barrier.wait(timeout=10)
                for _ in range(15):
                    status = vault.health()
                    with guard:
                        results.append(status)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=probe, daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors[0]
        assert len(results) == 90
        wrong = [s.message for s in results if not s.ok and s.message != "health check timeout"]
        assert wrong == [], f"{len(wrong)} of 90 concurrent probes said not ok: {wrong[:3]}"
        assert sum(s.ok for s in results) >= 85

    def test_health_checked_at_is_taken_at_each_call(
        self, vault: memvault.Vault, provider_capabilities: frozenset[str]
    ) -> None:
        """P25: checked_at is the time of the probe behind that answer, not of start-up or of a probe
        long gone: two answers a pause apart carry times a pause apart. A remote service may answer
        from a probe up to its health interval old (1 s), so the pause over a network is longer."""
        remote = Capability.REMOTE in provider_capabilities
        pause, freshness = (1.5, 1.5) if remote else (0.3, 0.5)
        first = vault.health()
        time.sleep(pause)
        second = vault.health()
        gap = (second.checked_at - first.checked_at).total_seconds()
        assert 0.25 <= gap <= pause + 5.0
        age = (dt.datetime.now(dt.timezone.utc) - second.checked_at).total_seconds()
        assert -0.5 <= age <= freshness
