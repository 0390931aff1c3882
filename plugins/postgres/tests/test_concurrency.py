"""Appends from several processes: whole, none lost, and the cap checked in the same transaction (P9, P12)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from pg_helpers import body

import memvault
from memvault_postgres.testing import TemporaryCluster

_CHILD = r"""
import json, sys
import memvault
dsn, schema, writer = sys.argv[1], sys.argv[2], int(sys.argv[3])
accepted = rejected = 0
with memvault.open("postgres", dsn=dsn, schema=schema, scanner="off") as vault:
    for k in range(40):
        token = f"<p{writer:02d}-{k:03d}-padding>"  # 17 bytes
        try:
            vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="PERSONA",
                                                content=token, mode="append"))
            accepted += 1
        except memvault.CapExceeded:
            rejected += 1
print(json.dumps({"accepted": accepted, "rejected": rejected}))
"""


def test_appends_from_processes_never_exceed_the_cap_and_lose_nothing(
    cluster: TemporaryCluster, vault: memvault.Vault, schema_name: str
) -> None:
    """4 processes x 40 appends of 17 bytes race for PERSONA's 1500-byte cap: exactly 88 are accepted,
    the body is exactly those 88 whole tokens, and every other append got CapExceeded."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, cluster.dsn(), schema_name, str(w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in range(4)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    accepted = sum(r["accepted"] for r in results)
    assert sum(r["rejected"] for r in results) == 160 - accepted
    text = body(vault, tier="PERSONA")
    tokens = re.findall(r"<p\d\d-\d\d\d-padding>", text)
    assert len(text.encode()) <= 1500
    assert accepted == 1500 // 17 == len(tokens) == len(set(tokens))
    assert "".join(tokens) == text
