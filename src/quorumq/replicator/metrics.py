"""The replicator driver's Prometheus metrics (`quorumq replicator run --metrics HOST:PORT`,
docs/observability.md): what its sink counted, its heartbeat, the checkpoint job's last round, and
per source queue the messages not yet replicated.

The driver is not an event loop: prometheus_client's own HTTP server thread serves the scrape. It
reads the JSON files the jobs write (atomically replaced) and the queries' progress the driver's
loop last fetched from Spark (a dict replaced whole), so it never calls into the JVM itself."""

import json
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from quorumq import limits
from quorumq.core.replicator import decode_offsets
from quorumq.errors import Error, QuorumqError
from quorumq.metrics import BoundedLabels, Families
from quorumq.replicator.datasource import METRIC_COUNTERS
from quorumq.replicator.jobs import Settings


class DriverMetrics:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.progress: dict[str, dict] = {}  # query name -> its last progress with data (see `refresh`)
        self._queue_label = BoundedLabels(limits.METRICS_GROUP_TOPICS_MAX)
        self._server = None

    def serve(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        try:
            self._server, _ = start_http_server(int(port), host or "127.0.0.1", registry=registry)
        except (OSError, ValueError) as error:
            raise QuorumqError(Error.CONFIG_INVALID, f"cannot serve metrics on {address}: {error}") from None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()

    def refresh(self, queries: list[Any]) -> None:
        """Called by the driver's loop: each query's last progress that read our source."""
        progress = {}
        for query in queries:
            last = query.lastProgress
            if last and last["sources"] and not last["sources"][0]["description"].startswith("Rate"):
                progress[query.name] = last
        self.progress = progress

    def collect(self):
        settings = self.settings
        families = Families({"node_type": "replicator", "node_id": f"{settings.source}->{settings.target}"})
        totals = _read_json(settings.metrics_path)
        yield families.counter("quorumq_replicator_messages_total", "messages the sink handled, by outcome",
                               {name: totals.get(name, 0) for name in METRIC_COUNTERS}, ["outcome"])
        heartbeat = _read_json(settings.heartbeat_path)
        yield families.gauge("quorumq_replicator_heartbeat_alive", "1 while heartbeats cross to the target",
                             int(bool(heartbeat.get("alive"))))
        yield families.gauge("quorumq_replicator_heartbeat_latency_seconds", "the last heartbeat's travel time",
                             heartbeat.get("latencyMs", 0) / 1000)
        groups = _read_json(settings.groups_path)
        yield families.gauge("quorumq_replicator_checkpoint_groups", "groups the checkpoint job's last round "
                             "translated, or skipped for their live consumers on the target",
                             {state: len(groups.get(state, {})) for state in ("translated", "skipped")}, ["state"])
        rates, lag = {}, {}
        for name, progress in self.progress.items():
            source = progress["sources"][0]
            rates[(name, "input")] = source.get("inputRowsPerSecond") or 0.0
            rates[(name, "processed")] = source.get("processedRowsPerSecond") or 0.0
            for queue, behind in queue_lag(source.get("endOffset"), source.get("latestOffset")).items():
                key = self._queue_label(queue)
                lag[key] = lag.get(key, 0) + behind
        yield families.gauge("quorumq_replicator_rows_per_second", "rows per second of the last micro-batch, "
                             "read (input) and written (processed)", rates, ["job", "rate"])
        yield families.gauge("quorumq_replicator_lag_messages", "source messages not yet replicated", lag,
                             ["topic", "broker", "queue_id"])


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet
        return {}


def queue_lag(end_offset: Any, latest_offset: Any) -> dict[tuple[str, str, str], int]:
    """Per source queue (topic, broker, queue id), the messages past what the last batch read;
    Spark's progress gives the offsets as JSON text ("null" before the first batch)."""
    end_offset, latest_offset = (json.loads(value) if isinstance(value, str) else value
                                 for value in (end_offset, latest_offset))
    if not end_offset or not latest_offset:
        return {}
    end, latest = decode_offsets(end_offset), decode_offsets(latest_offset)
    return {(q.topic, q.broker, str(q.queue_id)): latest[q] - end.get(q, latest[q]) for q in latest}
