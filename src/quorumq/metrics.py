"""Prometheus metrics, one rule for every process (docs/observability.md lists them).

Off unless `metricsExporterType=PROM` (RocketMQ's key and default). The hot paths count in plain
ints and dicts owned by the event-loop thread; the families are built from them only when
Prometheus scrapes. The scrape is served on that same loop (quorumq/http.py at
`metricsPromExporterHost:metricsPromExporterPort/metrics`), so the collectors read the process's
state without locks. `prometheus_client` formats the families.
"""

import asyncio
import bisect
import logging
from collections.abc import Callable, Iterable, Sequence

import grpc
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from quorumq import limits
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.http import Response, serve_http

log = logging.getLogger("quorumq.metrics")

# RocketMQ's buckets: rpc latency in ms (RemotingMetricsManager), message sizes in bytes.
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)


def enabled(config: Config) -> bool:
    return config["metricsExporterType"] == "PROM"


def address(config: Config) -> tuple[str, int]:
    """Where the process serves /metrics."""
    return config["metricsPromExporterHost"] or config["bindAddress"], config["metricsPromExporterPort"]


class Histogram:
    """Bucket counts kept as plain ints; `buckets` gives Prometheus's cumulative form."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.total += value * times

    def buckets(self) -> list[tuple[str, int]]:
        cumulative, result = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts):
            cumulative += count
            result.append((bound, cumulative))
        return result


class BoundedLabels:
    """The first `limit` label values are kept; later ones all read as METRICS_OVERFLOW_LABEL."""

    __slots__ = ("limit", "seen")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set = set()

    def __call__(self, value):
        if value in self.seen:
            return value
        if len(self.seen) < self.limit:
            self.seen.add(value)
            return value
        return limits.METRICS_OVERFLOW_LABEL if isinstance(value, str) else \
            tuple(limits.METRICS_OVERFLOW_LABEL for _ in value)


class Families:
    """Builds families that share the process's labels (RocketMQ's cluster, node_type, node_id)."""

    def __init__(self, common: dict[str, str]) -> None:
        self.names = list(common)
        self.values = list(common.values())

    def gauge(self, name: str, doc: str, samples, labels: Sequence[str] = ()) -> Metric:
        return self._fill(GaugeMetricFamily(name, doc, labels=[*self.names, *labels]), samples, labels)

    def counter(self, name: str, doc: str, samples, labels: Sequence[str] = ()) -> Metric:
        return self._fill(CounterMetricFamily(name, doc, labels=[*self.names, *labels]), samples, labels)

    def _fill(self, family: Metric, samples, labels: Sequence[str]) -> Metric:
        """`samples`: one value without extra labels, else {label values: value} or such pairs."""
        if not labels:
            family.add_metric(self.values, samples)
            return family
        for label_values, value in samples.items() if isinstance(samples, dict) else samples:
            family.add_metric([*self.values, *_as_tuple(label_values)], value)
        return family

    def histogram(self, name: str, doc: str, labels: Sequence[str], histograms: dict) -> Metric:
        family = HistogramMetricFamily(name, doc, labels=[*self.names, *labels])
        for label_values, histogram in histograms.items():
            family.add_metric([*self.values, *_as_tuple(label_values)], histogram.buckets(), histogram.total)
        return family


def _as_tuple(values) -> tuple:
    return values if isinstance(values, tuple) else (values,)


class RpcLatency(grpc.aio.ServerInterceptor):
    """rocketmq_rpc_latency: every unary answer and server stream of a gRPC server, timed from the
    handler's start to its last response, by method and outcome (client streams are sessions,
    not requests: not timed)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.histograms: dict[tuple[str, str, str], Histogram] = {}

    def family(self, families: Families) -> Metric:
        return families.histogram("rocketmq_rpc_latency", "gRPC handling time in milliseconds",
                                  ["protocol_type", "request_code", "response_code"], self.histograms)

    def _observe(self, method: str, outcome: str, started: float) -> None:
        key = ("grpc", method, outcome)
        histogram = self.histograms.get(key)
        if histogram is None:
            histogram = self.histograms[key] = Histogram(RPC_LATENCY_BUCKETS_MS)
        histogram.observe((self.clock.monotonic() - started) * 1000)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        method = handler_call_details.method.rpartition("/")[2]
        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def unary(request, context):
                started, outcome = self.clock.monotonic(), "OK"
                try:
                    return await behavior(request, context)
                except BaseException as exc:
                    outcome = type(exc).__name__
                    raise
                finally:
                    self._observe(method, outcome, started)

            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer,
                                                       handler.response_serializer)
        behavior = handler.unary_stream

        async def stream(request, context):
            started, outcome = self.clock.monotonic(), "OK"
            try:
                async for response in behavior(request, context):
                    yield response
            except BaseException as exc:
                outcome = type(exc).__name__
                raise
            finally:
                self._observe(method, outcome, started)

        return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer, handler.response_serializer)


class _Collector:
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self.collect = collect


class Exporter:
    """The /metrics endpoint of one process, on its event loop."""

    def __init__(self, config: Config, collect: Callable[[], Iterable[Metric]]) -> None:
        self.host, self.port = address(config)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(collect))
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await serve_http(self.host, self.port, self._answer, "metrics (metricsPromExporterPort)")
        log.info("metrics at http://%s/metrics", self.address)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, method: str, path: str, body: bytes) -> Response:
        if method != "GET" or path not in ("/metrics", "/"):
            return "404 Not Found", "text/plain", b"quorumq serves /metrics\n"
        return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
