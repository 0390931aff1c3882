"""An erasure finishes whatever language the server's messages are in (P24, #36).

The provider knows that ``VACUUM FULL`` left no old row version of the erased rows in a shard's
files, and its background retry knows when a rewrite can drop them, only from VACUUM's report, a
notice in the server's ``lc_messages``. These tests run a server of their own whose messages are
in German (``de_DE.UTF-8``: the locale must be generated, ``.ci/run`` does it; the translations
come with Debian's server package). A role that may set ``lc_messages`` (a superuser, or on
PostgreSQL 15 and later one granted ``SET ON PARAMETER lc_messages``) reads the report in ``C``;
one that may not cannot confirm an erasure: it stays pending, never reported complete, and the
warning names the ``GRANT`` that ends it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg_helpers import BusyReaders, body, no_trace, old_snapshot, put, recall, recorded, until_erasures_finished

import memvault
from memvault_postgres.testing import TemporaryCluster

LOCALE = "de_DE.UTF-8"
#: A short first pause of the background retry, and a forget that answers pending in well under a second.
FAST: dict[str, Any] = {"erase_retry_interval": 0.2, "erase_lock_timeout": 0.3}
#: Seconds a pending erasure may take to finish once nothing holds it any more.
DEADLINE = 15.0
#: Threads recalling the partition meanwhile (two: the machine running the matrix has two cores).
READERS = 2


def _locale_missing() -> str:
    """Why the server cannot speak German here ("" when it can)."""
    try:
        found = subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False).stdout.split()
    except OSError as exc:
        return f"cannot list the system's locales: {exc}"
    if LOCALE.lower().replace("-", "") not in {name.lower().replace("-", "") for name in found}:
        return (
            f"locale {LOCALE} is not generated: `sed -i 's/^# *{LOCALE}/{LOCALE}/' /etc/locale.gen && locale-gen` "
            "(.ci/run does it)"
        )
    return ""


@pytest.fixture(scope="module")
def german() -> Iterator[TemporaryCluster]:
    """A throwaway server whose messages are in German, for this module."""
    missing = _locale_missing()
    if missing:
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"CI runs the erasure tests on a German-speaking server: {missing}")
        pytest.skip(missing)
    with TemporaryCluster(settings={"lc_messages": LOCALE}) as server:
        with server.admin("memvault") as conn, pytest.raises(psycopg.errors.DivisionByZero) as raised:
            conn.execute("SELECT 1 / 0")
        assert "Division durch Null" in str(raised.value), f"precondition: the server speaks German ({raised.value})"
        yield server


def _role(cluster: TemporaryCluster, *, grant: bool = False, own_setting: str = "") -> str:
    """A new login role that is no superuser and may create the store's schema in database memvault."""
    role = f"eraser_{uuid.uuid4().hex[:12]}"
    with cluster.admin() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT CREATE ON DATABASE memvault TO {role}")
        if grant:
            conn.execute(f"GRANT SET ON PARAMETER lc_messages TO {role}")
        if own_setting:
            conn.execute(f"ALTER ROLE {role} SET lc_messages = '{own_setting}'")
    return role


def _open(cluster: TemporaryCluster, schema_name: str, user: str, **settings: Any) -> memvault.Vault:
    dsn = cluster.dsn(user=user)
    return memvault.open("postgres", dsn=dsn, schema=schema_name, scanner="off", **settings)


class _Readers(BusyReaders):
    """Readers recalling the partition in process, on the role's own vault."""

    def __init__(self, cluster: TemporaryCluster, schema_name: str, user: str) -> None:
        super().__init__(READERS, DEADLINE)
        self.vault = _open(cluster, schema_name, user)

    def recall_once(self, n: int) -> str | None:
        try:
            recall(self.vault, "ordinary note today")
        except memvault.MemvaultError as exc:
            return str(exc)
        return None

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.vault.close()


def _seed(vault: memvault.Vault, secret: str, subject: str) -> None:
    """Lines the readers recall, and the subject's line in the same partition (the same shard)."""
    notes = "".join(f"ordinary note {i} about the garden today\n" for i in range(200))
    put(vault, notes, tier="daily", key="2025-01-01")
    put(vault, f"the secret is {secret}\n", subject=subject)


def _forget(vault: memvault.Vault, subject: str) -> memvault.ForgetResult:
    return vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id=subject))


def _grant_advice(caplog: pytest.LogCaptureFixture, role: str) -> list[str]:
    """The provider's warnings that tell the operator the grant that lets erasures finish."""
    wanted = f'GRANT SET ON PARAMETER lc_messages TO "{role}"'
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "memvault_postgres.provider" and r.levelno == logging.WARNING and wanted in r.getMessage()
    ]


def test_a_pending_erasure_under_busy_readers_finishes_by_itself_on_a_german_server_p24(
    german: TemporaryCluster, schema_name: str
) -> None:
    """A superuser sets lc_messages to C for its VACUUMs: the background retry reads the removable cutoff
    and the rewrite's report as on an English server, and finishes the erasure once the old transaction
    ended (before: it could read neither, stopped, and the text stayed in the files)."""
    secret = f"germantext{uuid.uuid4().hex}"
    with _open(german, schema_name, "postgres", **FAST) as vault:
        _seed(vault, secret, "subject-g")
        with _Readers(german, schema_name, "postgres") as readers, old_snapshot(german) as holder:
            result = _forget(vault, "subject-g")
            assert (result.removed, result.pending) == (1, True)  # the old snapshot still sees the rows
            assert body(vault) == ""
            time.sleep(1.0)  # retry rounds at about 0.2 and 0.6 s: the old snapshot still sees the rows
            assert recorded(german, schema_name) > 0
            holder.execute("ROLLBACK")
            took = until_erasures_finished(german, schema_name)  # no forget, no write, no restart meanwhile
            recalls = sum(readers.done)
        print(f"finished {took:.2f} s after the old transaction ended; {recalls} recalls by the readers")
        assert vault.health().pending_erasures == 0
        assert recall(vault, secret) == []
    no_trace(german, schema_name, secret)


def test_an_erasure_completes_at_once_on_a_german_server_and_the_connection_speaks_german_again_p24(
    german: TemporaryCluster, schema_name: str
) -> None:
    """Nothing holds the rows: the forget's own rewrite confirms the erasure (before: pending, since the
    report could not be read), and the pooled connection is back in the server's language afterwards."""
    secret = f"germanonce{uuid.uuid4().hex}"
    with _open(german, schema_name, "postgres", pool_size=1, erase_retry_interval=60.0) as vault:
        _seed(vault, secret, "subject-o")
        result = _forget(vault, "subject-o")
        assert (result.removed, result.pending) == (1, False)
        assert vault.health().pending_erasures == 0
        with vault.provider.pool.connection() as conn:  # type: ignore[attr-defined]
            assert conn.execute("SHOW lc_messages").fetchone()[0] == LOCALE
    no_trace(german, schema_name, secret)


def test_a_role_that_may_not_set_lc_messages_keeps_the_erasure_pending_until_granted_p24(
    german: TemporaryCluster, schema_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the grant the report cannot be read: the forget answers pending (never complete), health
    counts it, the retry keeps it recorded after the old transaction ended, and the warnings name the
    GRANT; once granted, the background retry finishes it with no restart."""
    caplog.set_level(logging.WARNING, logger="memvault_postgres.provider")
    role = _role(german)
    secret = f"ungranted{uuid.uuid4().hex}"
    with _open(german, schema_name, role, **FAST) as vault:
        _seed(vault, secret, "subject-u")
        with _Readers(german, schema_name, role), old_snapshot(german) as holder:
            result = _forget(vault, "subject-u")
            assert (result.removed, result.pending) == (1, True)
            holder.execute("ROLLBACK")
        time.sleep(1.5)  # retry rounds at about 0.2, 0.6 and 1.4 s: the old transaction has ended
        assert recorded(german, schema_name) > 0  # never confirmed, so never reported complete
        assert vault.health().pending_erasures == 1
        again = _forget(vault, "subject-u")  # nothing holds the rows now, and still no confirmation
        assert (again.removed, again.pending) == (0, True)
        assert recorded(german, schema_name) > 0
        assert _grant_advice(caplog, role), "no warning named the GRANT that lets the erasure finish"
        with german.admin() as admin:
            admin.execute(f"GRANT SET ON PARAMETER lc_messages TO {role}")
        took = until_erasures_finished(german, schema_name)  # the background retry, with no restart
        print(f"finished {took:.2f} s after the grant")
        assert vault.health().pending_erasures == 0
    no_trace(german, schema_name, secret)


def test_a_role_granted_set_on_lc_messages_erases_at_once_p24(german: TemporaryCluster, schema_name: str) -> None:
    role = _role(german, grant=True)
    secret = f"granted{uuid.uuid4().hex}"
    with _open(german, schema_name, role, erase_retry_interval=60.0) as vault:
        _seed(vault, secret, "subject-a")
        result = _forget(vault, "subject-a")
        assert (result.removed, result.pending) == (1, False)
    no_trace(german, schema_name, secret)


def test_a_role_whose_own_lc_messages_is_c_erases_without_the_grant_p24(
    german: TemporaryCluster, schema_name: str
) -> None:
    """``ALTER ROLE ... SET lc_messages = 'C'`` (by a superuser): the sessions read VACUUM's report in C
    already, and the provider sets nothing (the role could not set it back)."""
    role = _role(german, own_setting="C")
    secret = f"ownsetting{uuid.uuid4().hex}"
    with _open(german, schema_name, role, erase_retry_interval=60.0) as vault:
        _seed(vault, secret, "subject-c")
        result = _forget(vault, "subject-c")
        assert (result.removed, result.pending) == (1, False)
    no_trace(german, schema_name, secret)
