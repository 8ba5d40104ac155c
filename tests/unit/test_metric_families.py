import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from quorumq import limits
from quorumq.broker.metrics import BrokerCounters
from quorumq.clock import Clock
from quorumq.core.replicator import QueueKey, encode_offsets
from quorumq.metrics import BoundedLabels, Families, Histogram
from quorumq.replicator.jobs import Settings
from quorumq.replicator.metrics import DriverMetrics
from quorumq.store import AppendResult


def test_label_values_past_the_bound_are_summed_under_the_overflow_label():
    counters = BrokerCounters(Clock())
    counters.topic_label = BoundedLabels(2)
    for topic in ("A", "B", "C", "D", "A"):
        counters.stored({topic: 1}, AppendResult([(0, 0)], 100))
    assert counters.messages_in == {"A": 2, "B": 1, limits.METRICS_OVERFLOW_LABEL: 2}
    pairs = BoundedLabels(1)
    assert [pairs(("T", "G")), pairs(("T", "H"))] == [("T", "G"), (limits.METRICS_OVERFLOW_LABEL,) * 2]


def test_a_batch_is_counted_per_topic_at_its_average_size():
    counters = BrokerCounters(Clock())
    counters.stored({"A": 3, "B": 1}, AppendResult([(1000, 0)] * 4, 1400))
    assert counters.messages_in == {"A": 3, "B": 1} and counters.bytes_in == {"A": 300, "B": 100}
    assert counters.sizes["A"].counts[0] == 3 and counters.sizes["A"].total == 300


def test_histogram_buckets_are_cumulative_and_exported():
    histogram = Histogram((1, 10))
    for value in (0.5, 1, 5, 50):
        histogram.observe(value)
    assert histogram.buckets() == [("1", 2), ("10", 3), ("+Inf", 4)]

    class Collector:
        def collect(self):
            families = Families({"node_type": "broker"})
            yield families.histogram("latency", "doc", ["method"], {"Send": histogram})
            yield families.gauge("things", "doc", 3)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    text = generate_latest(registry).decode()
    assert 'latency_bucket{le="10",method="Send",node_type="broker"} 3.0' in text
    assert 'things{node_type="broker"} 3.0' in text


def test_the_replicator_driver_exports_its_totals_heartbeat_lag_per_queue_and_checkpoint_round(tmp_path):
    settings = Settings("127.0.0.1:1", "127.0.0.1:2", ("T",), tmp_path, {})
    settings.metrics_path.write_text(json.dumps({"batch": 3, "written": 90, "deduped": 10}))
    settings.heartbeat_path.write_text(json.dumps({"alive": True, "latencyMs": 250}))
    settings.groups_path.write_text(json.dumps({"translated": {"G1": 2}, "skipped": {"G2": 1, "G3": 3}}))
    queue = QueueKey("T", "broker-a", 1)
    metrics = DriverMetrics(settings)
    metrics.progress = {"replicate A->B": {"sources": [{
        "inputRowsPerSecond": 50.0, "processedRowsPerSecond": 40.0,
        "endOffset": json.dumps(encode_offsets({queue: 90})),
        "latestOffset": json.dumps(encode_offsets({queue: 100}))}]}}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert 'quorumq_replicator_messages_total{node_id="127.0.0.1:1->127.0.0.1:2",node_type="replicator",' \
           'outcome="written"} 90.0' in text
    assert 'quorumq_replicator_heartbeat_latency_seconds{' in text and "} 0.25" in text
    assert 'quorumq_replicator_lag_messages{broker="broker-a",node_id="127.0.0.1:1->127.0.0.1:2",' \
           'node_type="replicator",queue_id="1",topic="T"} 10.0' in text
    assert 'quorumq_replicator_checkpoint_groups{node_id="127.0.0.1:1->127.0.0.1:2",node_type="replicator",' \
           'state="skipped"} 2.0' in text


def test_every_metric_the_grafana_dashboard_queries_is_documented():
    root = Path(__file__).resolve().parents[2]
    dashboard = json.loads((root / "docs" / "grafana" / "quorumq-dashboard.json").read_text())
    documented = set(re.findall(r"^\| `(\w+)`", (root / "docs" / "observability.md").read_text(), re.MULTILINE))
    # Every metric the dashboard names carries a selector, "name{...}".
    queried = {re.sub(r"_(bucket|count|sum)$", "", name) for panel in dashboard["panels"]
               for target in panel.get("targets", []) for name in re.findall(r"(\w+)\{", target["expr"])}
    assert queried and queried <= documented, queried - documented
