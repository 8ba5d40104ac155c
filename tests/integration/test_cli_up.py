"""`quorumq up`, `quorumq namesrv` and `quorumq broker` as an operator runs them."""

import signal
from pathlib import Path

import pytest

from harness import LocalCluster, check_for, cli, free_base_port, pid_alive, process_of, stop_process
from quorumq.cli.up import PROXIES_MAX, REPLICAS_MAX, plan
from quorumq.client import AdminClient, Blocking, Message, Producer
from quorumq.config import Kind, read_properties
from quorumq.errors import QuorumqError


def test_up_refuses_an_unknown_key_naming_it(tmp_path):
    result = cli("up", "--dir", tmp_path, "--set", "noSuchKey=1")
    assert result.returncode == 2
    assert "unknown config key 'noSuchKey'" in result.stderr
    assert not (tmp_path / "cluster.json").exists()


def test_up_refuses_keys_it_lays_out_and_bad_values(tmp_path):
    laid_out = cli("up", "--dir", tmp_path, "--set", "listenPort=1")
    assert laid_out.returncode == 2 and "listenPort" in laid_out.stderr
    bad_value = cli("up", "--dir", tmp_path, "--set", "flushDiskType=SOMETIMES")
    assert bad_value.returncode == 2 and "flushDiskType" in bad_value.stderr


def test_servers_refuse_an_unknown_config_key(tmp_path):
    for kind in ("namesrv", "broker"):
        config = tmp_path / f"{kind}.conf"
        config.write_text("listenPort=1\nbogusKey=true\n")
        result = cli(kind, "-c", config)
        assert result.returncode == 2, result
        assert "unknown config key 'bogusKey'" in result.stderr


def taken_address(address: str) -> str:
    return f"CONFIG_INVALID: cannot listen on {address}"


def test_a_server_refuses_a_port_another_process_listens_on(cluster, tmp_path):
    """gRPC's default SO_REUSEPORT would let the second bind succeed and take a share of the first
    one's connections; each kind must refuse to start instead, and the first keeps serving."""
    namesrv, broker = (process_of(cluster, kind) for kind in ("namesrv", "broker"))
    broker_properties = read_properties(Path(broker["config"]).read_text())
    ha_address = f"127.0.0.1:{broker_properties['haListenPort']}"
    for kind, taken, changes, refused in (
            ("namesrv", namesrv, {}, taken_address(namesrv["address"])),
            ("broker", broker, {}, taken_address(broker["address"])),
            ("broker", broker, {"listenPort": str(free_base_port())}, f"{taken_address(ha_address)} for replication")):
        properties = read_properties(Path(taken["config"]).read_text())
        if kind == "broker":
            properties["storePathRootDir"] = str(tmp_path / "second-store")
        config = tmp_path / f"second-{kind}.conf"
        config.write_text("".join(f"{key}={value}\n" for key, value in {**properties, **changes}.items()))
        result = cli(kind, "-c", config)
        assert result.returncode == 1, result
        assert refused in result.stderr, result.stderr
        assert pid_alive(taken["pid"])
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        assert admin.broker_status(broker["address"])


def test_up_lays_out_ports_configs_and_cluster_file(start_cluster):
    cluster = start_cluster(brokers=2, cluster="TestCluster",
                            sets={"flushDiskType": "SYNC_FLUSH", "brokerNotActiveTimeoutMillis": "30000"},
                            broker_sets=["1:brokerPermission=4"])
    base = int(cluster["access_point"].rsplit(":", 1)[1])
    assert cluster["cluster"] == "TestCluster" and cluster["access_point"] == f"127.0.0.1:{base}"
    namesrv, broker_a, broker_b = cluster["processes"]
    assert [p["kind"] for p in cluster["processes"]] == ["namesrv", "broker", "broker"]
    assert [p["address"] for p in cluster["processes"]] == [f"127.0.0.1:{base + offset}" for offset in (0, 10, 20)]
    assert [(p["broker_name"], p["broker_id"], p["role"]) for p in (broker_a, broker_b)] == [
        ("broker-a", 0, "master"), ("broker-b", 0, "master")]
    assert all(pid_alive(p["pid"]) for p in cluster["processes"])
    assert len({p["data_dir"] for p in cluster["processes"]}) == 3

    namesrv_config, a_config, b_config = (read_properties(open(p["config"]).read()) for p in cluster["processes"])
    assert namesrv_config == {"listenPort": str(base), "brokerNotActiveTimeoutMillis": "30000",
                              "metricsExporterType": "PROM", "metricsPromExporterPort": str(base + 100)}
    # Every process's metrics port is its gRPC port + 100, named in cluster.json.
    assert [p["metrics"] for p in cluster["processes"]] == [
        f"127.0.0.1:{base + offset}" for offset in (100, 110, 120)]
    assert a_config["haListenPort"] == str(base + 11) and b_config["haListenPort"] == str(base + 21)
    ports = [int(c[key]) for c in (namesrv_config, a_config, b_config) for key in ("listenPort", "haListenPort")
             if key in c]
    assert all(base <= port < base + 100 for port in ports)
    assert a_config["flushDiskType"] == b_config["flushDiskType"] == "SYNC_FLUSH"
    assert a_config["brokerClusterName"] == "TestCluster" and a_config["namesrvAddr"] == namesrv["address"]
    assert "brokerPermission" not in a_config and b_config["brokerPermission"] == "4"
    assert a_config["storePathRootDir"] == broker_a["data_dir"]

    with Blocking(AdminClient, cluster["access_point"]) as admin:
        registered = {(b.cluster, b.broker_name, b.address) for b in admin.cluster_info().brokers}
    assert registered == {("TestCluster", "broker-a", broker_a["address"]),
                          ("TestCluster", "broker-b", broker_b["address"])}


def test_up_stops_every_process_on_sigterm(tmp_path):
    cluster = LocalCluster(tmp_path)
    try:
        info = cluster.start()
        cluster.up.send_signal(signal.SIGTERM)
        assert cluster.up.wait(timeout=30) == 0
        assert not any(pid_alive(p["pid"]) for p in info["processes"])
        assert not (tmp_path / "cluster.json").exists()
    finally:
        cluster.stop()


def test_up_reports_a_dead_broker_and_does_not_restart_it(tmp_path):
    cluster = LocalCluster(tmp_path)
    try:
        info = cluster.start()
        broker = info["processes"][1]
        stop_process(broker, signal.SIGKILL)
        check_for(10, 0.1, lambda: "exited" in cluster.up_log.read_text(), "up reports the dead broker")
        assert cluster.up.poll() is None, "up keeps running"
        assert not pid_alive(broker["pid"])
    finally:
        cluster.stop()


def test_up_lays_out_proxies_on_one_shared_port(tmp_path):
    processes = plan(tmp_path, 30000, brokers=2, cluster="C", sets=[("maxMessageSize", "1024")], broker_sets=[],
                     proxies=3)
    proxies = [p for p in processes if p.kind is Kind.PROXY]
    assert [(p.name, p.port) for p in proxies] == [(f"proxy-{i}", 30094) for i in range(3)]
    assert all(p.values == {"namesrvAddr": "127.0.0.1:30000", "grpcServerPort": "30094",
                            "grpcServerReusePort": "true", "maxMessageSize": "1024"} for p in proxies)
    for bad in (-1, PROXIES_MAX + 1):
        with pytest.raises(QuorumqError, match="--proxies"):
            plan(tmp_path, 30000, brokers=1, cluster="C", sets=[], broker_sets=[], proxies=bad)


def test_up_lays_out_replica_groups(tmp_path):
    processes = plan(tmp_path, 30000, brokers=2, cluster="C", replicas=3,
                     sets=[("brokerRole", "SYNC_MASTER"), ("inSyncReplicas", "2")],
                     broker_sets=[(4, "slaveTimeout", "500")])
    brokers = [p for p in processes if p.kind is Kind.BROKER]
    assert [(p.name, p.port, p.replica, p.values["brokerId"]) for p in brokers] == [
        ("broker-a-0", 30010, 0, "0"), ("broker-a-1", 30012, 1, "1"), ("broker-a-2", 30014, 2, "2"),
        ("broker-b-0", 30020, 0, "0"), ("broker-b-1", 30022, 1, "1"), ("broker-b-2", 30024, 2, "2")]
    assert [p.values["brokerRole"] for p in brokers] == ["SYNC_MASTER", "SLAVE", "SLAVE"] * 2
    assert all(p.values["totalReplicas"] == "3" and p.values["inSyncReplicas"] == "2" for p in brokers)
    assert [p.values["haListenPort"] for p in brokers[:3]] == ["30011", "30013", "30015"]
    assert brokers[4].values["slaveTimeout"] == "500" and "slaveTimeout" not in brokers[3].values
    for bad in (0, REPLICAS_MAX + 1):
        with pytest.raises(QuorumqError):
            plan(tmp_path, 30000, brokers=1, cluster="C", sets=[], broker_sets=[], replicas=bad)


def test_up_calls_a_replica_group_up_only_once_it_takes_a_send(start_cluster):
    """With inSyncReplicas=2 and enableSlaveActingMaster a send is refused (IN_SYNC_REPLICAS_NOT_ENOUGH)
    until the slave is in sync: cluster.json must not announce the cluster before then, and it
    names each broker's id and role as routed."""
    cluster = start_cluster(replicas=2, sets={"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2",
                                              "enableSlaveActingMaster": "true"})
    with Blocking(Producer, cluster["access_point"]) as producer:
        [result] = producer.send_batch("ReadyTopic", [Message(b"first")])
    assert result.status == "SEND_OK"
    assert [(p["kind"], p.get("broker_id"), p.get("role")) for p in cluster["processes"]] == [
        ("namesrv", None, None), ("broker", 0, "master"), ("broker", 1, "slave")]


def test_up_names_what_keeps_a_cluster_from_being_writable(tmp_path):
    """A group that can never meet its quorum: `up` gives up after its timeout, says why, writes no
    cluster.json and exits 1 (it stops what it started on the way out)."""
    cluster = LocalCluster(tmp_path, replicas=2, sets={"brokerRole": "SYNC_MASTER", "inSyncReplicas": "3"})
    cluster.args += ["--timeout", "5"]
    try:
        with pytest.raises(RuntimeError) as failed:
            cluster.start()
    finally:
        cluster.stop()
    assert "not writable within 5 s" in str(failed.value)
    assert "broker-a's master" in str(failed.value) and "refuses sends" in str(failed.value)
    assert not (tmp_path / "cluster.json").exists() and cluster.up.returncode == 1


def test_up_lays_out_a_zookeeper_ensemble_only_in_controller_mode(tmp_path):
    processes = plan(tmp_path, 30000, brokers=1, cluster="C", sets=[], broker_sets=[], replicas=3, controllers=2,
                     zookeepers=3)
    controller = next(p for p in processes if p.kind is Kind.CONTROLLER)
    assert controller.values["zookeeperAddress"] == "127.0.0.1:30001,127.0.0.1:30090,127.0.0.1:30091"
    for controllers, zookeepers in ((0, 3), (2, 2), (2, 7)):
        with pytest.raises(QuorumqError):
            plan(tmp_path, 30000, brokers=1, cluster="C", sets=[], broker_sets=[], controllers=controllers,
                 zookeepers=zookeepers)
