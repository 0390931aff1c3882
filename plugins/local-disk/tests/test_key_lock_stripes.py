"""A keyed write holds its key's lock, then its document's: the two never share an in-process lock.

local-disk guards each file with an ``flock`` plus an in-process lock taken from a fixed set of
stripes (a thread lock per stripe, picked by the hash of the file's folder and name). A keyed write
(P44) takes the key's lock and then the document's; when both names fell into one stripe the
thread waited for the lock it held: the process hung for ever, on 1 keyed write in 256.
"""

from __future__ import annotations

import threading
from pathlib import Path

import memvault
from memvault.contract.models import Partition, Tier
from memvault_local_disk import fs
from memvault_local_disk.idempotency import KEYS_DIR, _file
from memvault_local_disk.layout import location

WORKSPACE = "w1"


def _colliding_key() -> str:
    """A key whose lock file falls into the same stripe as pins.md of agent a1 (found by search)."""
    parts, name = location(Partition(workspace_id=WORKSPACE, kind="agent", owner_id="a1"), Tier.PINS, "")
    target = hash(("/".join(parts), name)) % fs._STRIPES
    for n in range(1_000_000):
        key = f"k-{n}"
        if hash((f"{WORKSPACE}/{KEYS_DIR}", _file(key))) % fs._STRIPES == target:
            return key
    raise AssertionError("no colliding key among a million")


def test_a_key_in_its_documents_stripe_does_not_hang_the_write(tmp_path: Path) -> None:
    key = _colliding_key()
    outcome: list[object] = []

    def write() -> None:
        with memvault.open("local-disk", root=str(tmp_path), scanner="off", embedder="off") as vault:
            request = memvault.RetainRequest(
                workspace_id=WORKSPACE, agent_id="a1", tier="pins", content="fact\n", mode="append",
                idempotency_key=key,
            )  # fmt: skip
            outcome.append(vault.retain(request))
            outcome.append(vault.retain(request))  # the repeat: answered from the key's record

    worker = threading.Thread(target=write, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the keyed write hung: its key's lock and its document's share a stripe"
    assert [r.bytes for r in outcome] == [5, 5]  # type: ignore[attr-defined]
