"""The official RocketMQ 5 Node.js client (rocketmq-client-nodejs 1.0.8), unchanged, against a single
broker, a replica group and a controller-mode group.

Goal: what an application does with the client works in every mode: sends with a tag, keys and
properties; a SimpleConsumer's receive (tag filter), ack and invisible time (a message not acked
comes back, with a higher delivery attempt); and in controller mode the master's SIGKILL while the
client sends every 50 ms: sends keep being acknowledged, and every acknowledged message is received
afterwards.

Method: one node process per test (tests/node/client.js through node_client.NodeClient) does
everything the test asks of the client; what the client answers is what is checked.
"""

import signal
import time
import uuid

import pytest

from controller_group import FAILOVER_S
from harness import LocalCluster, check_for, official_access_point, stop_process, wait_registered
from node_client import NodeClient

STARTUP_TIMEOUT_S = 15.0
INVISIBLE_MS = 1500  # the shortest a test can wait for; the broker's minimum is 1 s
SEND_INTERVAL_MS = 50


@pytest.fixture(scope="module")
def replica_cluster(tmp_path_factory):
    """A master and a slave that must both hold each send before it is acknowledged."""
    cluster = LocalCluster(tmp_path_factory.mktemp("node-replicas"), replicas=2,
                           sets={"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2"})
    try:
        info = cluster.start()
        wait_registered(info)
        yield info
    finally:
        cluster.stop()


@pytest.fixture
def group(controller_group):
    controller_group.restore()
    return controller_group


@pytest.fixture
def node(tmp_path):
    with NodeClient(tmp_path / "node-client.log") as client:
        yield client


def start_clients(node: NodeClient, access_point: str, topic: str, group: str, tag: str = "*") -> None:
    """A SimpleConsumer first, so its group exists before the first send, then a Producer."""
    node.call("consumer", timeout=STARTUP_TIMEOUT_S, access_point=access_point, group=group, topic=topic, tag=tag)
    node.call("producer", timeout=STARTUP_TIMEOUT_S, access_point=access_point, topics=[topic])


def receive_until(node: NodeClient, wanted, timeout: float = 15.0, invisible_ms: int = 30000) -> list[dict]:
    """Receive until wanted(every message so far) holds; a receive that fails counts as none."""
    got: list[dict] = []

    def enough() -> bool:
        got.extend(node.call("receive", max=32, invisible_ms=invisible_ms)["messages"])
        return wanted(got)

    check_for(timeout, 0, enough, "the messages received")
    return got


def send_receive_ack_and_invisible_time(node: NodeClient, access_point: str, topic: str) -> None:
    start_clients(node, access_point, topic, f"G{uuid.uuid4().hex[:8]}", tag="A")
    sent = {}
    for index in range(3):
        body = f"tagged-{index}"
        answer = node.call("send", topic=topic, body=body, tag="A", keys=[f"k{index}", "shared"],
                           properties={"order": str(index), "origin": "node"})
        sent[answer["message_id"]] = body
    node.call("send", topic=topic, body="other-tag", tag="B")

    first = receive_until(node, lambda got: len(got) >= len(sent), invisible_ms=INVISIBLE_MS)
    assert {m["message_id"]: m["body"] for m in first} == sent, "exactly the tag-A messages, each once"
    for message in first:
        index = message["body"].rsplit("-", 1)[1]
        assert message["tag"] == "A"
        assert message["keys"] == [f"k{index}", "shared"]
        assert message["properties"] == {"order": index, "origin": "node"}
        assert message["delivery_attempt"] == 1
    kept = first[0]
    for message in first[1:]:
        node.call("ack", message_id=message["message_id"])

    again = receive_until(node, lambda got: len(got) >= 1)
    assert [(m["message_id"], m["delivery_attempt"]) for m in again] == [(kept["message_id"], 2)], \
        "only the message not acked comes back, once its invisible time is over"
    node.call("ack", message_id=kept["message_id"])
    assert node.call("receive", max=32, invisible_ms=30000)["messages"] == [], "acked messages stay acked"


def test_send_receive_ack_and_invisible_time_on_a_single_broker(node, shared_cluster):
    send_receive_ack_and_invisible_time(node, official_access_point(shared_cluster), f"T{uuid.uuid4().hex[:8]}")


def test_send_receive_ack_and_invisible_time_on_a_replica_group(node, replica_cluster):
    send_receive_ack_and_invisible_time(node, official_access_point(replica_cluster), f"T{uuid.uuid4().hex[:8]}")


def test_send_receive_ack_and_invisible_time_in_controller_mode(node, group):
    send_receive_ack_and_invisible_time(node, official_access_point(group.cluster), group.new_topic())


def test_sends_keep_being_acknowledged_across_the_masters_sigkill(node, group):
    """The route lists each replica as an endpoint of its own (each forwards to the master), so the
    client, unchanged, moves to a live one: sends are acknowledged again at once, and every
    acknowledged message is there to receive afterwards."""
    topic = group.new_topic()
    start_clients(node, official_access_point(group.cluster), topic, f"G{uuid.uuid4().hex[:8]}")
    node.call("send_every", topic=topic, interval_ms=SEND_INTERVAL_MS)
    node.wait_events(lambda events: sum(e["ok"] for e in events) >= 10, 10, "10 sends acknowledged")
    master = group.master()
    killed_at = time.time()
    stop_process(master, signal.SIGKILL)

    def acknowledged_after_kill(events) -> list[dict]:
        return [e for e in events if e["ok"] and e["t0"] > killed_at]

    events = node.wait_events(lambda events: len(acknowledged_after_kill(events)) >= 20, FAILOVER_S,
                              "20 sends started after the kill acknowledged")
    node.call("stop_sending")
    events = node.events
    first_ack_s = min(e["t1"] for e in acknowledged_after_kill(events)) - killed_at
    last = sorted(events, key=lambda e: e["seq"])[-10:]
    assert all(e["ok"] for e in last), f"the last sends failed: {[e['error'] for e in last if not e['ok']]}"

    acknowledged = {e["body"] for e in events if e["ok"]}
    received = receive_until(node, lambda got: acknowledged <= {m["body"] for m in got}, timeout=30)
    for message in received:
        node.call("ack", message_id=message["message_id"])
    print(f"first acknowledged send {first_ack_s:.3f} s after the kill; {len(acknowledged)} of {len(events)} "
          f"sends acknowledged; {len(received) - len({m['body'] for m in received})} received twice")
