"""The postgres provider's database span inside the vault's (#37), read from the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import memvault
from memvault import telemetry


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    yield exporter
    telemetry.set_tracer_provider(None)
    provider.shutdown()


def test_each_verb_s_queries_are_a_postgresql_span_inside_the_verb_s_span(
    vault: memvault.Vault, spans: InMemorySpanExporter
) -> None:
    vault.retain(
        memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="Metric units.", mode="append")
    )
    vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="metric"))
    vault.forget(memvault.ForgetRequest(workspace_id="w", agent_id="a", id="AGENT.md"))
    named = {span.name: span for span in spans.get_finished_spans()}
    for verb, outer in (
        ("retain", "update_memory postgres"),
        ("recall", "search_memory postgres"),
        ("forget", "delete_memory postgres"),
    ):
        database = named[f"{verb} postgresql"]
        assert database.parent is not None
        assert database.parent.span_id == named[outer].context.span_id
        attributes = dict(database.attributes or {})
        assert (attributes["db.system"], attributes["db.operation.name"]) == ("postgresql", verb)
        assert "metric" not in str(attributes).lower()


def _get(app: object, path: str) -> tuple[int, str]:
    """One GET through the ASGI app, in this thread's event loop (no HTTP client needed)."""
    import asyncio

    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))  # type: ignore[operator]
    status = next(int(str(m["status"])) for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")  # type: ignore[misc]
    return status, body.decode("utf-8")


def test_the_service_s_metrics_show_the_postgres_pool(vault: memvault.Vault) -> None:
    from memvault_http_remote.app import create_app
    from memvault_http_remote.settings import ServerSettings, TokenStore

    vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="anything"))
    status, text = _get(create_app(vault, ServerSettings(), TokenStore([])), "/metrics")
    assert status == 200
    assert 'memvault_db_pool_connections{state="in_use"}' in text
    assert 'memvault_db_pool_connections{state="idle"}' in text
    assert "memvault_db_pool_max_connections 10.0" in text
    assert "memvault_db_pool_waiting_requests 0.0" in text
