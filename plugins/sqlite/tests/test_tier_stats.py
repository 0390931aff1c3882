"""Schema v6: ``tier_stats`` holds, per partition and tier, the sums of its documents' line and term counts.

Recall reads its BM25 statistics there (one row per tier instead of one per
document), so the table must equal the sums over ``documents`` after any mix of
writes, forgets and erasures, and a database migrated from v5 must start equal.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memvault
from memvault_sqlite.schema import SCHEMA_VERSION

_SUMS = (
    "SELECT partition_id, tier, sum(line_count), sum(term_count) FROM documents"
    " GROUP BY partition_id, tier HAVING sum(line_count) != 0 OR sum(term_count) != 0"
)
_STATS = "SELECT partition_id, tier, line_count, term_count FROM tier_stats WHERE line_count != 0 OR term_count != 0"


def _tables(path: Path) -> tuple[set[tuple[object, ...]], set[tuple[object, ...]]]:
    conn = sqlite3.connect(str(path))
    try:
        return set(conn.execute(_SUMS).fetchall()), set(conn.execute(_STATS).fetchall())
    finally:
        conn.close()


_agents = st.sampled_from(["a1", "a2"])
_text = st.lists(
    st.sampled_from(["tea at five", "", "the walrus keeper", "metric units and more units", "x"]),
    min_size=1,
    max_size=4,
).map(lambda lines: "".join(line + "\n" for line in lines))
_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("retain"),
            _agents,
            st.sampled_from(["AGENT", "daily", "PERSONA"]),
            st.sampled_from(["2025-01-01", "2025-01-02"]),
            _text,
            st.sampled_from(["append", "replace"]),
            st.sampled_from(["", "subject-1", "subject-2"]),
        ),
        st.tuples(st.just("forget-label"), _agents, st.integers(0, 5)),
        st.tuples(st.just("forget-subject"), st.sampled_from(["subject-1", "subject-2"])),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_tier_stats_equal_the_documents_sums_after_any_writes_and_forgets(
    tmp_path: Path, ops: list[tuple[str, ...]]
) -> None:
    path = tmp_path / f"stats-{abs(hash(tuple(ops)))}.db"
    labels: list[str] = []
    with memvault.open("sqlite", path=str(path), scanner="off", synchronous="off") as vault:
        for op in ops:
            if op[0] == "retain":
                _, agent, tier, key, content, mode, subject = op
                result = vault.retain(
                    memvault.RetainRequest(
                        workspace_id="w",
                        agent_id=agent,
                        tier=tier,
                        key=key if tier == "daily" else "",
                        content=content,
                        mode=mode,
                        data_subject_id=subject,
                    )
                )
                labels.append(result.id)
            elif op[0] == "forget-label":
                _, agent, index = op
                if labels:
                    label = labels[int(index) % len(labels)]
                    vault.forget(memvault.ForgetRequest(workspace_id="w", agent_id=agent, id=label))
            else:
                vault.forget(memvault.ForgetRequest(workspace_id="w", data_subject_id=op[1]))
            sums, stats = _tables(path)
            assert stats == sums, op


def test_a_v5_database_migrates_to_tier_stats_equal_to_its_sums(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    with memvault.open("sqlite", path=str(path), scanner="off") as vault:
        for agent, tier, key in [("a1", "AGENT", ""), ("a1", "daily", "2025-01-02"), ("a2", "daily", "2025-01-03")]:
            content = "tea at five\nthe walrus keeper\n"
            request = memvault.RetainRequest(
                workspace_id="w", agent_id=agent, tier=tier, key=key, content=content, mode="append"
            )
            vault.retain(request)
    conn = sqlite3.connect(str(path))  # back to v5 as that release wrote it: no table, no triggers
    for trigger in ("tier_stats_on_insert", "tier_stats_on_update", "tier_stats_on_move", "tier_stats_on_delete"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE tier_stats")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    with memvault.open("sqlite", path=str(path), scanner="off") as vault:
        hits = vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a1", query="walrus keeper")).hits
        assert hits, "recall works on the migrated file"
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    sums, stats = _tables(path)
    assert stats == sums
    assert len(stats) == 3


def test_a_document_moved_to_another_tier_moves_its_totals(tmp_path: Path) -> None:
    # memvault never moves a document; the trigger that covers it must still keep the totals right.
    path = tmp_path / "move.db"
    with memvault.open("sqlite", path=str(path), scanner="off") as vault:
        request = memvault.RetainRequest(
            workspace_id="w", agent_id="a1", tier="AGENT", content="tea\nwalrus\n", mode="append"
        )
        vault.retain(request)
    conn = sqlite3.connect(str(path))
    conn.execute("UPDATE documents SET tier = 'PERSONA'")
    conn.commit()
    conn.close()
    sums, stats = _tables(path)
    assert stats == sums
    assert {row[1] for row in stats} == {"PERSONA"}
