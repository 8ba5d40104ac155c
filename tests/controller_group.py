"""A controller-mode broker group as a user sees it (brokerStatus, the admin commands' JSON),
with the settings that make its failures quick to find on a 2-core machine; shared by the
controller tests and the fault-injection suite. What it shares with a static-role group lives in
tests/replica_group.py (ReplicaGroupBase)."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import LocalCluster, check_for, cli, pid_alive, process_state
from quorumq.cli.admin import controller_output
from quorumq.client import ClientError, Credentials
from quorumq.client.blocking import Blocking
from quorumq.client.controller import ControllerClient, controller_addresses
from quorumq.cluster import cluster_pb2 as pb
from replica_group import SETTLE_S, ReplicaGroupBase

SEND_OK = "SEND_OK"
FAILOVER_S = 15.0  # the bound a test waits for an election; the benchmark measures the real time
SETS = {
    "allAckInSyncStateSet": "true",
    "brokerHeartbeatInterval": "500",
    "controllerHeartBeatTimeoutMills": "3000",
    "syncBrokerMetadataPeriod": "1000",
    "checkSyncStateSetPeriod": "1000",
    "haMaxTimeSlaveNotCatchup": "5000",
    "scanNotActiveBrokerInterval": "500",
    "scanInactiveMasterInterval": "1000",
    "zookeeperSessionTimeoutMillis": "2000",
    "registerNameServerPeriod": "1000",
    "brokerNotActiveTimeoutMillis": "3000",
    "haSendHeartbeatInterval": "500",
    "haHousekeepingInterval": "3000",
    "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
    "maxMessageSize": str(256 * 1024),
}


class Group(ReplicaGroupBase):
    """The broker group broker-a of a controller-mode cluster, seen as a user sees it: which broker
    is master changes, so `master()` and `slaves()` ask."""

    def __init__(self, cluster: dict, credentials: Credentials | None = None) -> None:
        super().__init__(cluster, admin_timeout_s=3.0, credentials=credentials)
        self.brokers = [p for p in cluster["processes"] if p["kind"] == "broker"]
        self.controllers = [p for p in cluster["processes"] if p["kind"] == "controller"]
        self.zookeepers = [p for p in cluster["processes"] if p["kind"] == "zookeeper"]
        self.zookeeper = self.zookeepers[0]
        self.proxies = [p for p in cluster["processes"] if p["kind"] == "proxy"]
        self.controller_addresses = cluster["controller_addresses"]
        # What the group's waits poll, asked in this process: a `quorumq admin` run per poll costs
        # most of a second of CPU, which the processes being waited for need on two cores.
        self.controller = Blocking(ControllerClient, controller_addresses(self.controller_addresses),
                                   credentials=credentials)

    def close(self) -> None:
        self.controller.close()
        super().close()

    def routed_role(self, broker: dict) -> str:
        """The broker's role in cluster.json, which `quorumq up` keeps as the name server routes it."""
        entries = json.loads(self.cluster_file.read_text())["processes"]
        return next(entry["role"] for entry in entries if entry["address"] == broker["address"])

    def says_master(self, broker: dict) -> bool:
        """Whether the broker runs (not stopped) and its status says master."""
        if not pid_alive(broker["pid"]) or process_state(broker["pid"]) == "T":
            return False
        try:
            return self.status(broker)["brokerRole"] != "SLAVE"
        except ClientError:
            return False

    def master(self, timeout: float = FAILOVER_S) -> dict:
        """The one running broker that says it is master."""
        def the_master():
            masters = [broker for broker in self.brokers if self.says_master(broker)]
            return masters[0] if len(masters) == 1 else None
        return check_for(timeout, 0.05, the_master, "exactly one master")

    def slaves(self) -> list[dict]:
        master = self.master()
        return [b for b in self.brokers if b is not master]

    def admin_json(self, *args: str) -> dict:
        signing = ("--ak", self.credentials.access_key, "--sk", self.credentials.secret_key) if self.credentials else ()
        result = cli("admin", *args, "-a", self.controller_addresses, "--json", *signing)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def replica_info(self) -> dict:
        """What `quorumq admin getSyncStateSet -b broker-a --json` prints."""
        reply = self.controller.call("GetReplicaInfo", pb.BrokerSetRequest(broker_name="broker-a"))
        return controller_output(reply, "no broker set broker-a").data

    def leader(self) -> str:
        """The leading controller's address as `getControllerMetaData` shows it ("" while none leads)."""
        return self.controller.metadata().leader_address

    def current_master(self) -> dict:
        return self.master()

    def topic_brokers(self) -> list[dict]:
        return self.brokers  # slaves copy topics from the master; every replica has it at once

    def restartable(self) -> list[dict]:
        return self.zookeepers + self.brokers + self.controllers

    def settle(self) -> None:
        """Every broker answering and a leading controller."""
        for broker in self.brokers:
            check_for(SETTLE_S, 0.1, lambda broker=broker: self.status(broker), f"{broker['address']} answers")
        check_for(SETTLE_S, 0.2, self.leader, "a leading controller")

    def in_sync(self, **expected: object) -> dict | None:
        """Every broker answering and in the SyncStateSet at its address, the master and controller
        agreeing: the controller's getSyncStateSet. (A broker stopped a moment ago can still be in
        the controller's SyncStateSet, under the address it had.)"""
        info = self.replica_info()
        status = self.status_shows(**expected)
        addresses = {broker["address"] for broker in self.brokers}
        set_addresses = {info["brokers"].get(str(broker_id)) for broker_id in info["sync_state_set"]}
        every_one = set_addresses == addresses == set(info["brokers"].values())
        agree = status is not None and status["syncStateSet"] == ",".join(map(str, sorted(info["sync_state_set"])))
        return info if every_one and agree and all(self.status(broker) for broker in self.brokers) else None

    def leave_only(self, survivor: dict) -> None:
        """SIGKILL every broker but `survivor`, which the controller then elects: the slaves
        first, each once the master has dropped it from the SyncStateSet, then the master. (A
        slave killed a moment after the master can still be elected, and an election leaves the
        new master alone in the SyncStateSet: the survivor would never be.)"""
        master = self.master()
        for slave in self.slaves():
            if slave is not survivor:
                slave_id = int(self.status(slave)["brokerId"])
                self.kill(slave)
                check_for(SETTLE_S, 0.1,
                          lambda slave_id=slave_id: slave_id not in self.replica_info()["sync_state_set"],
                          "the killed slave out of the SyncStateSet")
        if master is not survivor:
            self.kill(master)
        check_for(FAILOVER_S, 0.05, lambda: self.master() is survivor, "the survivor elected")

    def send(self, topic: str, body: bytes) -> str:
        """One send: its status name, or the error's name."""
        try:
            return self.send_message(topic, body).status
        except ClientError as error:
            return error.name


@contextmanager
def started_group(directory: Path, controllers: int, sets: dict[str, str] | None = None,
                  credentials: Credentials | None = None, **options) -> Iterator[Group]:
    """A controller-mode cluster of one group of three (`quorumq up` with SETS, and `sets` over
    them, and LocalCluster's other options) as a Group, whose calls are signed with `credentials`;
    every process stops when the block ends, whatever happened."""
    cluster = LocalCluster(directory, replicas=3, controllers=controllers, sets={**SETS, **(sets or {})}, **options)
    try:
        group = Group(cluster.start(timeout=90), credentials)
        group.cluster_file = cluster.directory / "cluster.json"
        try:
            yield group
        finally:
            group.close()
    finally:
        cluster.stop()
