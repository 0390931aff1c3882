"""``memvault serve`` reports its embedding backlog in health and metrics (P37; #36).

The service probes health through its vault (``Vault.health_probe``), so ``/v1/health`` and the
``memvault_embedding_backlog`` gauge count the lines still waiting for a vector, as an in-process
``Vault.health()`` does. Found when the service asked the provider's hook directly: with 1,300 lines
waiting, health said nothing of them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpremote_support import ServerProcess, memvault_command, write_config

import memvault

LINES = 1500


def seed(db_path: Path) -> None:
    """Lines written with no embedder: every one waits for a vector once the service embeds."""
    with memvault.open("sqlite", path=str(db_path), scanner="off", embedder="off") as vault:
        for day in range(LINES // 300):  # 300 lines a daily document, under its 30,000-byte cap
            body = "".join(f"ordinary note {day} {i} about the garden, the river and the weather\n" for i in range(300))
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="t-backlog",
                    agent_id="a1",
                    tier="daily",
                    key=f"2026-01-{day + 1:02d}",
                    content=body,
                    mode="replace",
                )
            )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServerProcess]:
    pytest.importorskip("memvault_embed_minilm", reason="the default embedder is not installed (memvault-embed-minilm)")
    seed(tmp_path / "served.db")
    config = write_config(tmp_path, "sqlite", "health_interval = 0.1\nmetrics_public = true\n", embedder="minilm")
    server = ServerProcess(
        memvault_command("--config", str(config), "serve"), tmp_path, drop_env=("MEMVAULT_EMBEDDER",)
    )
    yield server
    server.stop()


def _gauge(text: str) -> float | None:
    found = re.search(r"^memvault_embedding_backlog(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_health_and_metrics_count_the_lines_waiting_for_a_vector(served: ServerProcess) -> None:
    seen_health: list[int] = []
    seen_gauge: list[float] = []
    deadline = time.monotonic() + 120
    with httpx.Client(base_url=served.url, timeout=10.0) as http:
        while time.monotonic() < deadline:
            status = http.get("/v1/health").json()
            assert status["ok"] is True
            seen_health.append(status.get("embedding_backlog", 0))
            gauge = _gauge(http.get("/metrics").text)
            if gauge is not None:
                seen_gauge.append(gauge)
            if seen_health[-1] == 0 and any(seen_health):
                break  # counted down to nothing: the key is left out at 0 (P37's wire form)
            time.sleep(0.1)
    backlog = [n for n in seen_health if n]
    assert backlog, f"health never counted the {LINES} lines waiting for a vector"
    assert max(backlog) <= LINES
    assert backlog == sorted(backlog, reverse=True), "the backlog only shrinks while nothing is written"
    assert seen_health[-1] == 0, "the backlog did not drain within 120 s"
    assert any(0 < g <= LINES for g in seen_gauge), "the metrics gauge never counted the backlog"
