"""Controller mode on a ZooKeeper ensemble of three (`quorumq up --controller --zookeepers 3`), and
membership changes the controllers must follow.

Goal: one node lost changes nothing (writes go on, a failover still elects), two nodes lost (no
quorum) stop every election while the data path keeps serving, and the ensemble recovers; a broker
restarted on a new address keeps its id.

Method: faults are real signals to the nodes' pids; a node's role in the ensemble is read with
ZooKeeper's `srvr` four-letter word, and the group as a user sees it (brokerStatus, the admin
commands' JSON and exit codes).
"""

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from controller_group import FAILOVER_S, SEND_OK, SETTLE_S, started_group
from harness import check_for, cli, free_base_port, start_process, stop_process
from quorumq.cli.up import PORT_SPAN
from quorumq.config import read_properties


@pytest.fixture(scope="module")
def ensemble_group(tmp_path_factory):
    with started_group(tmp_path_factory.mktemp("ensemble"), controllers=1, zookeepers=3) as group:
        yield group


@pytest.fixture
def group(ensemble_group):
    ensemble_group.restore()
    check_for(SETTLE_S, 0.2, lambda: sorted(map(mode, ensemble_group.zookeepers)) == ["follower", "follower", "leader"],
              "a whole ensemble")
    return ensemble_group


def mode(node: dict) -> str:
    """The node's role in the ensemble ("leader", "follower"), or "" when it does not serve."""
    host, port = node["address"].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1) as connection:
            connection.sendall(b"srvr")
            answer = b"".join(iter(lambda: connection.recv(4096), b"")).decode()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in answer.splitlines() if line.startswith("Mode:")), "")


def test_up_runs_an_ensemble_of_three_within_its_port_span(group):
    base = int(group.cluster["access_point"].rsplit(":", 1)[1])
    ports = [int(node["address"].rsplit(":", 1)[1]) for node in group.zookeepers]
    assert len(set(ports)) == 3 and all(base < port < base + PORT_SPAN for port in ports)
    assert {node["data_dir"] for node in group.zookeepers} == {str(group.cluster_file.parent / name)
                                                               for name in ("zookeeper", "zookeeper-1", "zookeeper-2")}


def test_a_lost_node_changes_nothing_and_a_failover_still_elects(group):
    topic = group.new_topic()
    epoch = group.replica_info()["master_epoch"]
    stop_process(next(node for node in group.zookeepers if mode(node) == "leader"), signal.SIGKILL)
    assert group.send(topic, b"one node down") == SEND_OK
    old_master = group.master()
    stop_process(old_master, signal.SIGKILL)
    check_for(FAILOVER_S, 0.1, lambda: group.master() is not old_master, "a new master")
    check_for(FAILOVER_S, 0.05, lambda: group.send(topic, b"after the failover") == SEND_OK, "a send on it")
    assert group.replica_info()["master_epoch"] == epoch + 1
    assert {b"one node down", b"after the failover"} <= set(group.bodies(topic))


def test_two_lost_nodes_stop_elections_but_not_the_data_path(group):
    """Scenario: an election refused while ZooKeeper is down (no quorum)."""
    info = group.wait_in_sync()
    master = group.master()
    slave_id = next(int(broker_id) for broker_id in info["brokers"] if int(broker_id) != info["master_id"])
    topic = group.new_topic()
    paused = [node for node in group.zookeepers if mode(node) == "follower"][:1] + \
             [node for node in group.zookeepers if mode(node) == "leader"]
    for node in paused:
        os.kill(node["pid"], signal.SIGSTOP)
    try:
        check_for(SETTLE_S, 0.2, lambda: not any(mode(node) for node in group.zookeepers), "no node serving")
        assert [group.send(topic, f"no quorum {i}".encode()) for i in range(20)] == [SEND_OK] * 20
        refused = cli("admin", "electMaster", "-a", group.controller_addresses, "-b", "broker-a", "-i", str(slave_id))
        # The controller lost its ZooKeeper session with the quorum, so it leads no more.
        assert refused.returncode == 1 and "SERVICE_NOT_AVAILABLE" in refused.stderr, refused
        assert group.master() is master
        assert group.status(master)["masterEpoch"] == str(info["master_epoch"])
    finally:
        for node in paused:
            os.kill(node["pid"], signal.SIGCONT)
    assert group.wait_in_sync()["master_epoch"] == info["master_epoch"]
    assert {f"no quorum {i}".encode() for i in range(20)} <= set(group.bodies(topic))


def test_a_slave_restarted_on_a_new_address_keeps_its_id_and_rejoins(group):
    """Scenario 44: a broker restarted on another port keeps the id the controller gave it (its
    metadata file) and rejoins the SyncStateSet; the controller and the routes name the new address."""
    info = group.wait_in_sync()
    slave = next(broker for broker in group.brokers if broker is not group.master())
    broker_id = group.status(slave)["brokerId"]
    stop_process(slave)
    port = free_base_port(span=2)
    config = Path(slave["config"])
    properties = read_properties(config.read_text())
    properties.update(listenPort=str(port), haListenPort=str(port + 1))
    config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    slave["address"] = f"127.0.0.1:{port}"
    start_process(slave)
    moved = group.wait_in_sync()
    assert group.status(slave)["brokerId"] == broker_id and group.status(slave)["brokerRole"] == "SLAVE"
    assert moved["brokers"][broker_id] == slave["address"] and moved["master_epoch"] == info["master_epoch"]
    topic = group.new_topic()
    assert group.send(topic, b"after the move") == SEND_OK
    route = json.loads(cli("admin", "topicRoute", "-n", group.cluster["access_point"], "-t", topic, "--json").stdout)
    assert slave["address"] in route["brokers"][0]["addresses"].values()
