import json
import time

from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.dashboard.server import Dashboard, _group, _replica, _replicator


def test_rates_are_the_counters_change_since_the_previous_state():
    dashboard = Dashboard("127.0.0.1:1", [], None, Clock())
    dashboard._last = (time.monotonic() - 2.0, {("in", "T", ""): 10, ("out", "T", "G"): 4})
    shown = dashboard._topics_and_groups({("in", "T", ""): 30, ("out", "T", "G"): 8, ("lag", "T", "G"): 22})
    [topic] = shown["topics"]
    assert topic["in"] == 30 and topic["out"] == 8 and 9 < topic["in_rate"] <= 10 and 1.8 < topic["out_rate"] <= 2
    [group] = shown["consumer_groups"]
    assert group["group"] == "G" and group["lag"] == 22 and 1.8 < group["out_rate"] <= 2


def test_a_group_names_its_master_and_each_slaves_lag():
    master = _replica(pb.BrokerInfo(address="a:1", broker_id=0, role="SYNC_MASTER"),
                      {"brokerRole": "SYNC_MASTER", "commitLogMaxOffset": "500", "masterEpoch": "3",
                       "syncStateSet": "1,2", "brokerId": "1"})
    slave = _replica(pb.BrokerInfo(address="a:2", broker_id=2, role="SLAVE"),
                     {"brokerRole": "SLAVE", "commitLogMaxOffset": "380", "masterEpoch": "3", "brokerId": "2"})
    down = _replica(pb.BrokerInfo(address="a:3", broker_id=3, role="SLAVE"), None)
    group = _group("C", "broker-a", [slave, down, master])
    assert (group["master"], group["epoch"], group["sync_state_set"]) == ("a:1", 3, "1,2")
    assert [r["address"] for r in group["replicas"]] == ["a:1", "a:2", "a:3"]
    assert slave["lag_bytes"] == 120 and not down["answers"] and "lag_bytes" not in down


def test_a_replicators_status_is_read_from_its_checkpoint(tmp_path):
    (tmp_path / "heartbeat.json").write_text(json.dumps({"alive": True, "latencyMs": 12}))
    assert _replicator(tmp_path) == {"heartbeat": {"alive": True, "latencyMs": 12}, "metrics": None}
