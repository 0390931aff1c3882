"""Moving memory: export, import, a repeated (no-op) import and verify, between sqlite and local-disk.

A sqlite store of ``--agents`` agents x ``--days`` daily documents (each about
``--lines`` lines of ~60 bytes, one in ten tagged with a data subject) is
exported, imported into local-disk, imported again (idempotent: nothing
written), verified, and imported into a fresh sqlite store. Reports documents
per second and MB/s of body text for each step, and the export file's size.

    python bench/transfer_bench.py [--agents 20] [--days 50] [--lines 15]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import memvault
from memvault.transfer import export_store, import_store, verify_import

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
]


def _fill(vault: memvault.Vault, agents: int, days: int, lines: int) -> int:
    size = 0
    for agent in range(agents):
        for day in range(days):
            body = "".join(
                f"- {WORDS[(agent + day + n) % 15]} {WORDS[(day * 7 + n) % 15]} note {agent}/{day}/{n} of the day\n"
                for n in range(lines)
            )
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="bench",
                    agent_id=f"agent-{agent}",
                    tier="daily",
                    key=f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}",
                    content=body,
                    mode="replace",
                    data_subject_id=f"subject-{agent}" if day % 10 == 0 else "",
                )
            )
            size += len(body.encode())
    return size


def _timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--days", type=int, default=50)
    parser.add_argument("--lines", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memvault-transfer-bench-") as tmp:
        root = Path(tmp)
        (root / "disk").mkdir()
        source = memvault.open("sqlite", path=str(root / "source.db"), scanner="off", synchronous="normal")
        disk = memvault.open("local-disk", root=str(root / "disk"), scanner="off")
        target = memvault.open("sqlite", path=str(root / "target.db"), scanner="off", synchronous="normal")
        count = args.agents * args.days
        size = _fill(source, args.agents, args.days, args.lines)
        path = root / "export.jsonl"

        def export() -> None:
            with path.open("w", encoding="utf-8") as out:
                export_store(source, out)

        steps = [
            ("export sqlite", export),
            ("import into local-disk", lambda: import_store(disk, path)),
            ("import again (no-op)", lambda: import_store(disk, path)),
            ("verify local-disk", lambda: verify_import(disk, path)),
            ("import into sqlite", lambda: import_store(target, path)),
        ]
        rows = []
        for name, step in steps:
            seconds = _timed(step)
            rows.append((name, seconds, count / seconds, size / seconds / 1e6))
        print(f"{count} documents, {size / 1e6:.2f} MB of text; export file {path.stat().st_size / 1e6:.2f} MB\n")
        print("| step | seconds | documents/s | MB/s |\n|---|---|---|---|")
        for name, seconds, rate, mbs in rows:
            print(f"| {name} | {seconds:.2f} | {rate:.0f} | {mbs:.2f} |")
        assert verify_import(target, path) == []
        for vault in (source, disk, target):
            vault.close()


if __name__ == "__main__":
    main()
