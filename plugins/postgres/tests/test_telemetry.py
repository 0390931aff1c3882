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
