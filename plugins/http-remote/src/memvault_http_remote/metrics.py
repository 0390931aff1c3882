"""The service's Prometheus ``GET /metrics`` and its request observer (one registry per app).

Metrics (docs/operators/observability.md):

====================================================  =========  ==========================================
``memvault_http_requests_total``                      counter    requests by ``route``, ``method``, ``status``
``memvault_http_request_duration_seconds``            histogram  their latency, same labels
``memvault_scanner_rejections_total``                 counter    writes the scanner refused, by ``category``
``memvault_scanner_reviews_total``                    counter    the reviewer's answers, by ``outcome`` (if any)
``memvault_store_up``                                 gauge      1 when the provider's health is ok
``memvault_pending_erasures``                         gauge      erasures by data subject not yet complete
``memvault_embedding_backlog``                        gauge      lines waiting for a vector
``memvault_db_pool_connections``                      gauge      pooled connections by ``state`` (postgres)
``memvault_db_pool_max_connections``                  gauge      the pool's size limit (postgres)
``memvault_db_pool_waiting_requests``                 gauge      calls waiting for a pooled connection (postgres)
====================================================  =========  ==========================================

``route`` is the route's path template (``/v1/recall``), or ``unmatched`` for any path
the service does not serve, so a scanner of random paths cannot grow the label set. The gauges are read
at scrape time: the health ones from the service's cached probe (at most one probe
per ``health_interval``, however often Prometheus scrapes), the pool ones from the
provider's pool when it exposes ``get_stats()`` (psycopg_pool does).

Each app has its own :class:`~prometheus_client.CollectorRegistry`: two services in
one process (or one test after another) never share or pollute counts.

The observer is also where a request's OpenTelemetry server span starts, from the
caller's ``traceparent`` (:func:`memvault.telemetry.server_span`), so the service's
vault spans join the client's trace.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Final

import pluggy
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault import telemetry
from memvault.contract.errors import ContentRejected
from memvault.contract.models import HealthStatus
from memvault.vault import Vault

__all__ = ["METRICS_PATH", "ServiceMetrics", "metrics_endpoint"]

METRICS_PATH: Final = "/metrics"
UNMATCHED: Final = "unmatched"
#: Latency buckets in seconds: a recall takes milliseconds, a slow store seconds.
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

_hookimpl = pluggy.HookimplMarker("memvault")


class _RejectionCounter:
    """A wrapper around the vault's retain: counts the scanner's refusals by category.

    Registered after the scanner, so it wraps it: whatever route a retain comes by
    (``/v1/retain``, each item of ``/v1/retain/batch``), a refusal passes through here.
    """

    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    @_hookimpl(wrapper=True)
    def memvault_retain(self, request: Any) -> Any:
        try:
            return (yield)
        except ContentRejected as exc:
            self.counter.labels(category=exc.category or "unknown").inc()
            raise


class _StoreGauges(Collector):
    """Health and pool gauges, computed when Prometheus collects."""

    def __init__(self, health: Callable[[], HealthStatus | None], pool: Any) -> None:
        self.health = health
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        status = self.health()
        if status is not None:
            yield GaugeMetricFamily("memvault_store_up", "1 when the provider's health probe is ok", int(status.ok))
            yield GaugeMetricFamily(
                "memvault_pending_erasures",
                "erasures by data subject accepted but not yet complete",
                status.pending_erasures,
            )
            yield GaugeMetricFamily(
                "memvault_embedding_backlog", "indexed lines waiting for a vector", status.embedding_backlog
            )
        stats = _pool_stats(self.pool)
        if stats:
            size = stats.get("pool_size", 0)
            idle = stats.get("pool_available", 0)
            connections = GaugeMetricFamily(
                "memvault_db_pool_connections", "the provider's pooled connections by state", labels=["state"]
            )
            connections.add_metric(["in_use"], max(size - idle, 0))
            connections.add_metric(["idle"], idle)
            yield connections
            yield GaugeMetricFamily(
                "memvault_db_pool_max_connections", "the most connections the pool opens", stats.get("pool_max", 0)
            )
            yield GaugeMetricFamily(
                "memvault_db_pool_waiting_requests",
                "calls waiting for a pooled connection",
                stats.get("requests_waiting", 0),
            )


#: The outcomes a scanner's reviewer counts (memvault.scanner.plugin.BuiltinScanner.reviews).
REVIEW_OUTCOMES: Final = ("asked", "unanswered", "rejected", "cleared", "confirmed")


def review_counts(vault: Vault) -> dict[str, int] | None:
    """How the vault's scanner's reviewer answered so far (memvault.scanner.review), by outcome of
    :data:`REVIEW_OUTCOMES`; ``None`` when no scanner of the vault has a reviewer."""
    counts = [
        dict(plugin.reviews)
        for plugin in vault.plugin_manager.get_plugins()
        if getattr(plugin, "reviewer", None) is not None and isinstance(getattr(plugin, "reviews", None), dict)
    ]
    if not counts:
        return None
    return {outcome: int(sum(c.get(outcome, 0) for c in counts)) for outcome in REVIEW_OUTCOMES}


class _ReviewCounts(Collector):
    """How the scanner's reviewer answered (:func:`review_counts`), read when Prometheus collects; nothing
    when no scanner of the vault has a reviewer."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def collect(self) -> Iterator[Metric]:
        counts = review_counts(self.vault)
        if counts is None:
            return
        family = CounterMetricFamily(
            "memvault_scanner_reviews",
            "texts the scanner asked its reviewer about, by outcome: asked (every one), unanswered, rejected "
            "(an attack the cascade stored), cleared (a rejection overturned), confirmed (the verdict kept)",
            labels=["outcome"],
        )
        for outcome, count in counts.items():
            family.add_metric([outcome], count)
        yield family


def _pool_stats(pool: Any) -> dict[str, int]:
    get_stats = getattr(pool, "get_stats", None)
    if not callable(get_stats):
        return {}
    try:
        stats = get_stats()
    except Exception:  # noqa: BLE001 - a closed pool: no pool gauges rather than a failed scrape
        return {}
    return {str(k): int(v) for k, v in dict(stats).items() if isinstance(v, int)}


class ServiceMetrics:
    """One service's metrics: its registry, the request observer, and the ``/metrics`` answer."""

    def __init__(self, vault: Vault, health: Callable[[], HealthStatus | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.routes: list[BaseRoute] = []
        self.requests = Counter(
            "memvault_http_requests",
            "requests answered, by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "memvault_http_request_duration_seconds",
            "time to answer a request, by route, method and status",
            ["route", "method", "status"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.rejections = Counter(
            "memvault_scanner_rejections",
            "writes the scanner refused, by category",
            ["category"],
            registry=self.registry,
        )
        self.registry.register(_StoreGauges(health, getattr(vault.provider, "pool", None)))
        self.registry.register(_ReviewCounts(vault))
        vault.plugin_manager.register(_RejectionCounter(self.rejections), name=f"metrics:{id(self)}")

    def route(self, scope: Scope) -> str:
        """The template of the route serving ``scope`` (a wrong method still names it), else ``unmatched``."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return str(getattr(route, "path", UNMATCHED))
        return UNMATCHED

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def observe(self, app: ASGIApp, routes: Iterable[BaseRoute]) -> ASGIApp:
        """``app`` with every HTTP request counted and timed, and traced when tracing is on.

        :param routes: the routes ``app`` serves, whose templates label the requests.
        """
        self.routes = list(routes)
        return _Observed(app, self)


class _Observed:
    """The outermost layer of the service: it sees every answer, the request gate's 503s included.

    Other attributes are the wrapped app's (the gate's ``in_flight``, for tests and the server).
    """

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.metrics.route(scope)
        method = scope.get("method", "")
        status = [500]  # what a request that ends without an answer counts as

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        started = time.perf_counter()
        try:
            with telemetry.server_span(method, route, _headers(scope)) as span:
                await self.app(scope, receive, send_status)
                if span is not None:
                    span.set_attribute("http.response.status_code", status[0])
        finally:
            labels = (route, method, str(status[0]))
            self.metrics.requests.labels(*labels).inc()
            self.metrics.latency.labels(*labels).observe(time.perf_counter() - started)


def _headers(scope: Scope) -> dict[str, str]:
    if not telemetry.tracing():
        return {}
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}


def metrics_endpoint(
    metrics: ServiceMetrics,
    *,
    authenticate: Callable[[Request], object],
    public: bool,
    refresh: Callable[[], Awaitable[object]],
) -> Callable[[Request], Awaitable[Response]]:
    """``GET /metrics``: any valid token (``server.metrics_public = false``, the default), or none when public.

    :param refresh: brings the cached health up to date (at most one probe per ``health_interval``).
    """

    async def endpoint(request: Request) -> Response:
        if not public:
            authenticate(request)
        await refresh()
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    return endpoint
