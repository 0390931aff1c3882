"""``memvault parity postgres`` with no options, against a server libpq's environment names."""

from __future__ import annotations

import os
import subprocess
import sys

from memvault_postgres import DSN_ENV
from memvault_postgres.testing import TemporaryCluster


def test_memvault_parity_postgres_runs_with_no_options(cluster: TemporaryCluster) -> None:
    env = {**os.environ, **cluster.env(), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop(DSN_ENV, None)  # only PGHOST/PGPORT/PGUSER/PGDATABASE: what any libpq client reads
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from memvault.cli.main import main; main()",
            "parity",
            "postgres",
            "-k",
            "forget_by_subject",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout
    assert " 0 failed" in proc.stdout


def _scratch_schemas(cluster: TemporaryCluster) -> set[str]:
    import psycopg

    with psycopg.connect(cluster.dsn()) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'scratch\\_%'").fetchall()
    return {str(r[0]) for r in rows}


def test_memvault_parity_postgres_leaves_no_schema_behind_and_says_where_it_works(cluster: TemporaryCluster) -> None:
    """A run made a schema per test and left every one of them (507 after a whole run): each is dropped."""
    before = _scratch_schemas(cluster)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), DSN_ENV: cluster.dsn()}
    proc = subprocess.run(
        [sys.executable, "-c", "from memvault.cli.main import main; main()", "parity", "postgres", "-k", "forget"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "memvault parity postgres: each test works in a fresh scratch store, such as dsn=" in proc.stdout
    assert "schema='scratch_" in proc.stdout
    assert _scratch_schemas(cluster) == before
