"""Layer 4 (beside the facade): OpenTelemetry spans for the vault's verbs and lifecycle phases.

The spans follow the OpenTelemetry GenAI memory conventions (development
stability): ``gen_ai.operation.name`` is ``update_memory`` for a retain (the
conventions' upsert: an append and a replace alike), ``search_memory`` for a
recall and a read, ``delete_memory`` for a forget; the span is named
``{operation} {store id}`` and carries ``gen_ai.memory.store.id`` (the
provider's name, or ``[telemetry] store_id``), ``gen_ai.memory.record.id`` (the
document's label) and ``gen_ai.memory.record.count``, plus ``memvault.*``
attributes (workspace, agent, tier, status). Health, list_documents and the
lifecycle phases, which the conventions do not name, get ``memvault.*`` spans.

Memory text and queries stay out of every attribute and event unless the
operator opts in (``[telemetry] record_content = true`` or
``MEMVAULT_TRACE_CONTENT=true``): then ``gen_ai.memory.query.text`` and
``gen_ai.memory.records`` carry them, as the conventions' opt-in attributes.
An error is recorded by its type only (``error.type``), since a message may
quote what was written.

Optional: with ``opentelemetry-api`` not installed (``pip install
'memvault[otel]'``), :func:`traced` returns the function it decorates
unchanged, and the other helpers do nothing. Installed, spans are made only
while a real tracer provider is set (by the application, or by
``[telemetry] traces = "console"`` / ``"otlp"``): otherwise each call costs one
check of the global provider.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, ParamSpec, TypeVar

from memvault.contract.errors import ContentRejected, InvalidRequest

#: ``opentelemetry.trace`` once something imported it. Until an application (or :func:`configure`)
#: imports it, no tracer provider can be set, so memvault neither imports it (50 ms) nor checks it.
_trace: Any = None

__all__ = [
    "AVAILABLE",
    "TRACES",
    "configure",
    "db_span",
    "inject_headers",
    "record_content",
    "server_span",
    "client_span",
    "set_tracer_provider",
    "traced",
    "tracing",
]

#: Whether ``opentelemetry-api`` is installed (looked up once, without importing it).
AVAILABLE: Final = importlib.util.find_spec("opentelemetry") is not None
#: The values of ``[telemetry] traces``.
TRACES: Final = ("off", "console", "otlp")
_SCOPE: Final = "memvault"
_OTEL_TRACE: Final = "opentelemetry.trace"
_UNKNOWN: Final = object()
#: Whether the environment names a tracer provider for OpenTelemetry to load (read once).
_PROVIDER_FROM_ENV: Final = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_modules: Final = sys.modules
_TRUE: Final = frozenset({"1", "true", "yes", "on"})

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Settings:
    record_content = os.environ.get("MEMVAULT_TRACE_CONTENT", "").strip().lower() in _TRUE
    store_id = ""
    installed = ""  # the exporter memvault installed ("console", "otlp"), once per process
    provider: Any = None  # set_tracer_provider's, when not the global one


_settings = _Settings()
_cache: list[Any] = [None, None]  # [provider, its memvault tracer], then opentelemetry.propagate once used


def record_content() -> bool:
    """Whether spans may carry memory text and queries (the operator opted in)."""
    return _settings.record_content


def _tracer() -> Any:
    """The tracer, when a real tracer provider is set; ``None`` when spans would record nothing."""
    provider = _settings.provider
    if provider is None:
        trace = _trace if _trace is not None else _imported()
        if trace is None:
            return None  # never imported (or still importing): nobody can have set a provider
        provider = _global_provider(trace)
        if provider is None:
            return None
    if provider is not _cache[0]:
        # The proxy (no provider set yet) is one object for ever: cached as "off", like a no-op
        # provider. Setting a real provider makes get_tracer_provider() return another object.
        off = isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))
        _cache[1] = None if off else provider.get_tracer(_SCOPE)
        _cache[0] = provider
    return _cache[1]


def _global_provider(trace: Any) -> Any:
    """OpenTelemetry's global tracer provider; ``None`` while none is set.

    ``get_tracer_provider()`` looks ``OTEL_PYTHON_TRACER_PROVIDER`` up in ``os.environ`` on every
    call while no provider is set (a raised KeyError: microseconds per verb), so the module's
    global is read first, and the function called only when that variable names a provider or
    the global is not where this version of the API keeps it.
    """
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None and not _PROVIDER_FROM_ENV:
        return None
    return trace.get_tracer_provider()


def _imported() -> Any:
    global _trace
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None and hasattr(trace, "NoOpTracerProvider"):
        _trace = trace
    return _trace


def set_tracer_provider(provider: Any) -> None:
    """Make memvault's spans with ``provider`` rather than the global tracer provider; ``None``: the global one.

    For an application (or a test) that keeps its own provider instead of setting OpenTelemetry's
    global one (which can be set once per process).
    """
    global _trace
    if provider is not None:
        from opentelemetry import trace

        _trace = trace
    _settings.provider = provider


def tracing() -> bool:
    """Whether spans are being made now (the API is installed and a tracer provider is set)."""
    return AVAILABLE and _tracer() is not None


def configure(table: Mapping[str, Any] | None = None) -> None:
    """Apply the ``[telemetry]`` table of ``memvault.toml`` (the CLI, ``memvault serve``, ``open_from_config``).

    Keys: ``traces`` (``"off"``, the default; ``"console"``: spans printed to standard error;
    ``"otlp"``: sent by OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``), ``record_content``
    (memory text and queries in span attributes; default false) and ``store_id`` (the
    ``gen_ai.memory.store.id``; default the provider's name). ``MEMVAULT_TRACES`` and
    ``MEMVAULT_TRACE_CONTENT`` override the first two. An exporter is installed only when
    the application has not set a tracer provider of its own, and once per process.

    :raises InvalidRequest: for an unknown key, a bad value, or traces wanted without the
        packages they need (naming what to install).
    """
    table = dict(table or {})
    unknown = sorted(set(table) - {"traces", "record_content", "store_id"})
    if unknown:
        raise InvalidRequest(
            f"[telemetry] has no key {unknown[0]!r}: use traces, record_content or store_id", field="telemetry"
        )
    traces = os.environ.get("MEMVAULT_TRACES", "").strip() or table.get("traces", "off")
    if traces not in TRACES:
        raise InvalidRequest(
            f"[telemetry] traces must be one of {', '.join(TRACES)}, got {traces!r}", field="telemetry.traces"
        )
    content = table.get("record_content", False)
    env = os.environ.get("MEMVAULT_TRACE_CONTENT", "").strip().lower()
    if env:
        content = env in _TRUE
    if not isinstance(content, bool):
        raise InvalidRequest(
            f"[telemetry] record_content must be true or false, got {content!r}", field="telemetry.record_content"
        )
    store_id = table.get("store_id", "")
    if not isinstance(store_id, str):
        raise InvalidRequest(
            f"[telemetry] store_id must be a string, got {type(store_id).__name__}", field="telemetry.store_id"
        )
    if traces != "off":
        _install(traces)
    _settings.record_content = content
    _settings.store_id = store_id


def _install(traces: str) -> None:
    if not AVAILABLE:
        raise InvalidRequest(
            f"[telemetry] traces = {traces!r} needs OpenTelemetry: pip install 'memvault[otel]'",
            field="telemetry.traces",
        )
    from opentelemetry import trace

    if _settings.installed or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # ours is in place already, or the application chose its own provider
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        raise InvalidRequest(
            f"[telemetry] traces = {traces!r} needs the OpenTelemetry SDK: pip install 'memvault[otel]'",
            field="telemetry.traces",
        ) from None
    exporter: SpanExporter
    if traces == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr)
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter,
            )
        except ImportError:
            raise InvalidRequest(
                "[telemetry] traces = 'otlp' needs the OTLP exporter: "
                "pip install opentelemetry-exporter-otlp-proto-http",
                field="telemetry.traces",
            ) from None
        exporter = OTLPSpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _settings.installed = traces


# -- what each verb's span says ---------------------------------------------------------


def _scope(request: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {"memvault.workspace_id": request.workspace_id}
    for name in ("agent_id", "crew_id"):
        value = getattr(request, name, "")
        if value:
            attributes[f"memvault.{name}"] = value
    tier = getattr(request, "tier", None)
    if tier is not None:
        attributes["memvault.tier"] = getattr(tier, "value", str(tier))
    return attributes


def _records(items: list[dict[str, Any]]) -> str:
    return json.dumps(items, ensure_ascii=False)


def _retain(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    request = args[0]
    if result is None:
        attributes.update(_scope(request))
        attributes["memvault.retain.mode"] = getattr(request.mode, "value", "")
        if request.key:
            attributes["memvault.key"] = request.key
        if _settings.record_content:
            attributes["gen_ai.memory.records"] = _records([{"content": request.content}])
        return
    attributes["gen_ai.memory.record.id"] = result.id
    attributes["memvault.bytes"] = result.bytes


def _retain_many(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    if result is None:
        requests = args[0]
        if isinstance(requests, (list, tuple)):  # never a generator: the vault reads it once
            attributes["gen_ai.memory.record.count"] = len(requests)
            if requests:
                attributes["memvault.workspace_id"] = getattr(requests[0], "workspace_id", "")
        return
    attributes["memvault.failed"] = sum(1 for outcome in result if isinstance(outcome, Exception))


def _recall(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    request = args[0]
    if result is None:
        attributes.update(_scope(request))
        attributes["memvault.recall.limit"] = request.limit
        if _settings.record_content:
            attributes["gen_ai.memory.query.text"] = request.query
        return
    attributes["gen_ai.memory.record.count"] = len(result.hits)
    attributes["memvault.recall.quarantined"] = len(result.quarantined)
    if _settings.record_content:
        attributes["gen_ai.memory.records"] = _records(
            [{"id": hit.source, "content": hit.snippet, "score": hit.score} for hit in result.hits]
        )


def _read(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    request = args[0]
    if result is None:
        attributes.update(_scope(request))
        attributes["memvault.verb"] = "read"
        if request.key:
            attributes["memvault.key"] = request.key
        return
    attributes["gen_ai.memory.record.id"] = result.id
    attributes["gen_ai.memory.record.count"] = 1 if result.content else 0
    if _settings.record_content:
        attributes["gen_ai.memory.records"] = _records([{"id": result.id, "content": result.content}])


def _forget(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    request = args[0]
    if result is None:
        attributes.update(_scope(request))
        if request.id:
            attributes["gen_ai.memory.record.id"] = request.id
        attributes["memvault.forget.by"] = "id" if request.id else "data_subject"
        return
    attributes["gen_ai.memory.record.count"] = result.removed
    attributes["memvault.forget.pending"] = result.pending


def _list_documents(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    if result is None:
        attributes.update(_scope(args[0]))
        return
    attributes["gen_ai.memory.record.count"] = len(result.documents)


def _health(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    if result is not None:
        attributes["memvault.health.ok"] = result.ok
        attributes["memvault.pending_erasures"] = result.pending_erasures
        attributes["memvault.embedding_backlog"] = result.embedding_backlog


def _phase(args: tuple[Any, ...], result: Any, attributes: dict[str, Any]) -> None:
    if result is None:
        ctx = args[0]
        attributes["memvault.workspace_id"] = ctx.workspace_id
        attributes["memvault.agent_id"] = ctx.agent_id
        attributes["memvault.slot"] = ctx.slot
        attributes["memvault.session_id"] = ctx.session_id
        attributes["memvault.phase"] = ctx.phase
        if ctx.turn is not None:
            attributes["memvault.turn"] = ctx.turn


_Describe = Callable[[tuple[Any, ...], Any, dict[str, Any]], None]
#: verb -> (gen_ai.operation.name or "", span name's first word, what its attributes say)
_VERBS: Final[dict[str, tuple[str, str, _Describe]]] = {
    "retain": ("update_memory", "update_memory", _retain),
    "retain_many": ("update_memory", "update_memory", _retain_many),
    "recall": ("search_memory", "search_memory", _recall),
    "read": ("search_memory", "search_memory", _read),
    "forget": ("delete_memory", "delete_memory", _forget),
    "list_documents": ("", "memvault.list_documents", _list_documents),
    "health": ("", "memvault.health", _health),
    "turn.started": ("", "memvault.turn.started", _phase),
    "turn.completed": ("", "memvault.turn.completed", _phase),
    "compaction.requested": ("", "memvault.compaction.requested", _phase),
    "compaction.completed": ("", "memvault.compaction.completed", _phase),
}


def traced(verb: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a :class:`~memvault.Vault` method: one span per call, named and described as ``verb``'s.

    Without ``opentelemetry-api`` the method is returned as it is (no cost at all).
    """
    operation, prefix, describe = _VERBS[verb]

    def decorate(method: Callable[_P, _R]) -> Callable[_P, _R]:
        if not AVAILABLE:
            return method

        @functools.wraps(method)
        def with_span(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if _trace is None and _settings.provider is None and _OTEL_TRACE not in _modules:
                return method(*args, **kwargs)  # tracing off, OpenTelemetry never imported: no call more
            tracer = _tracer()
            if tracer is None:
                return method(*args, **kwargs)
            provider = str(getattr(args[0], "name", ""))
            store = _settings.store_id or provider
            attributes: dict[str, Any] = {"gen_ai.memory.store.id": store, "memvault.provider": provider}
            given = args[1:] or tuple(kwargs.values())
            if operation:
                attributes["gen_ai.operation.name"] = operation
                attributes["gen_ai.provider.name"] = "memvault"
            describe(given, None, attributes)
            with tracer.start_as_current_span(
                f"{prefix} {store}",
                kind=_trace.SpanKind.CLIENT if operation else _trace.SpanKind.INTERNAL,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    result = method(*args, **kwargs)
                except BaseException as exc:
                    _failed(span, exc)
                    raise
                after: dict[str, Any] = {"memvault.status": "ok"}
                describe(given, result, after)
                span.set_attributes(after)
                return result

        return with_span

    return decorate


def _failed(span: Any, exc: BaseException) -> None:
    """An error by its type (and a rejection by its category): never its message, which may quote content."""
    name = type(exc).__name__
    span.set_attribute("error.type", name)
    span.set_attribute("memvault.status", name)
    if isinstance(exc, ContentRejected):
        span.set_attribute("memvault.scan.category", exc.category)
    if _settings.record_content:
        span.record_exception(exc)
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, name))


@contextlib.contextmanager
def _span(name: str, kind: str, attributes: dict[str, Any], context: Any = None) -> Iterator[Any]:
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=getattr(_trace.SpanKind, kind),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _failed(span, exc)
            raise


def db_span(system: str, operation: str, namespace: str = "") -> contextlib.AbstractContextManager[Any]:
    """A span around one provider call's database work (``db.system``: ``"postgresql"``), or nothing."""
    if not AVAILABLE or _tracer() is None:
        return contextlib.nullcontext()
    attributes = {"db.system": system, "db.system.name": system, "db.operation.name": operation}
    if namespace:
        attributes["db.namespace"] = namespace
    return _span(f"{operation} {system}", "CLIENT", attributes)


def client_span(method: str, path: str, host: str, port: int) -> contextlib.AbstractContextManager[Any]:
    """The http-remote client's span around one call to the service (its retries included), or nothing."""
    if not AVAILABLE or _tracer() is None:
        return contextlib.nullcontext()
    attributes = {"http.request.method": method, "url.path": path, "server.address": host, "server.port": port}
    return _span(f"{method} {path}", "CLIENT", attributes)


def server_span(method: str, route: str, headers: Mapping[str, str]) -> contextlib.AbstractContextManager[Any]:
    """The service's span for one request, continuing the caller's trace (W3C ``traceparent``), or nothing."""
    if not AVAILABLE or _tracer() is None:
        return contextlib.nullcontext()
    attributes = {"http.request.method": method, "http.route": route}
    return _span(f"{method} {route}", "SERVER", attributes, context=_propagator().extract(headers))


def inject_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the current trace's ``traceparent`` added (a copy), or ``headers`` itself when not tracing."""
    if not AVAILABLE or _tracer() is None:
        return headers
    carrier = dict(headers)
    _propagator().inject(carrier)
    return carrier


def _propagator() -> Any:
    """``opentelemetry.propagate``, imported on first use: it loads the propagators' entry points (tens of ms)."""
    if not _cache[2:]:
        from opentelemetry import propagate

        _cache.append(propagate)
    return _cache[2]
