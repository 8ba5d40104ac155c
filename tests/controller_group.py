"""A controller-mode broker group as a user sees it (brokerStatus, the admin commands' JSON),
with the settings that make its failures quick to find on a 2-core machine; shared by the
controller tests and the fault-injection suite."""

import json
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import (
    LocalCluster,
    check_for,
    cli,
    pid_alive,
    process_state,
    resume,
    start_process,
    stop_process,
)
from quorumq.client import (
    AdminClient,
    Blocking,
    ClientError,
    Message,
    Producer,
    PullConsumer,
)

SEND_OK = "SEND_OK"
FAILOVER_S = 15.0  # the bound a test waits for an election; the benchmark measures the real time
SETTLE_S = 60.0
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


class Group:
    """The broker group broker-a of a controller-mode cluster, seen as a user sees it."""

    def __init__(self, cluster: dict) -> None:
        self.cluster = cluster
        self.brokers = [p for p in cluster["processes"] if p["kind"] == "broker"]
        self.controllers = [p for p in cluster["processes"] if p["kind"] == "controller"]
        self.zookeepers = [p for p in cluster["processes"] if p["kind"] == "zookeeper"]
        self.zookeeper = self.zookeepers[0]
        self.controller_addresses = cluster["controller_addresses"]
        self.admin = Blocking(AdminClient, cluster["access_point"], timeout_s=3.0)
        self.producer = Blocking(Producer, cluster["access_point"])

    def routed_role(self, broker: dict) -> str:
        """The broker's role in cluster.json, which `quorumq up` keeps as the name server routes it."""
        entries = json.loads(self.cluster_file.read_text())["processes"]
        return next(entry["role"] for entry in entries if entry["address"] == broker["address"])

    def close(self) -> None:
        self.producer.close()
        self.admin.close()

    def status(self, broker: dict) -> dict[str, str]:
        return self.admin.broker_status(broker["address"])

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
        result = cli("admin", *args, "-a", self.controller_addresses, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def replica_info(self) -> dict:
        return self.admin_json("getSyncStateSet", "-b", "broker-a")

    def wait_in_sync(self, timeout: float = SETTLE_S) -> dict:
        """Every broker running and in the SyncStateSet, the master and controller agreeing."""
        def all_in_sync():
            info = self.replica_info()
            status = self.status(self.master())
            in_sync = len(info["sync_state_set"]) == len(self.brokers) == len(info["brokers"])
            return info if in_sync and status["syncStateSet"] == ",".join(map(str, sorted(info["sync_state_set"]))) \
                else None
        return check_for(timeout, 0.2, all_in_sync, "every broker in the SyncStateSet")

    def restore(self) -> None:
        """Every process running (restarted, or continued after SIGSTOP) and answering, a leading
        controller, every broker in the SyncStateSet."""
        for process in self.zookeepers + self.brokers + self.controllers:
            if pid_alive(process["pid"]):
                resume(process)
            else:
                start_process(process)
        for broker in self.brokers:
            check_for(SETTLE_S, 0.1, lambda broker=broker: self.status(broker), f"{broker['address']} answers")
        check_for(SETTLE_S, 0.2, lambda: self.admin_json("getControllerMetaData")["leader"], "a leading controller")
        self.wait_in_sync()

    def leave_only(self, survivor: dict) -> None:
        """SIGKILL every broker but `survivor`, which the controller then elects: the slaves
        first, each once the master has dropped it from the SyncStateSet, then the master. (A
        slave killed a moment after the master can still be elected, and an election leaves the
        new master alone in the SyncStateSet: the survivor would never be.)"""
        master = self.master()
        for slave in self.slaves():
            if slave is not survivor:
                slave_id = int(self.status(slave)["brokerId"])
                stop_process(slave, signal.SIGKILL)
                check_for(SETTLE_S, 0.1,
                          lambda slave_id=slave_id: slave_id not in self.replica_info()["sync_state_set"],
                          "the killed slave out of the SyncStateSet")
        if master is not survivor:
            stop_process(master, signal.SIGKILL)
        check_for(FAILOVER_S, 0.05, lambda: self.master() is survivor, "the survivor elected")

    def new_topic(self) -> str:
        topic = f"T{uuid.uuid4().hex[:10]}"
        for broker in self.brokers:  # slaves copy topics from the master; every replica has it at once
            self.admin.update_topic(broker["address"], topic, read_queue_nums=1, write_queue_nums=1)
        return topic

    def send(self, topic: str, body: bytes) -> str:
        """One send: its status name, or the error's name."""
        try:
            return self.producer.send(topic, Message(body), queue_id=0).status
        except ClientError as error:
            return error.name

    def bodies(self, topic: str) -> list[bytes]:
        """Every message of the topic's queue 0, as its master serves it."""
        with Blocking(PullConsumer, self.cluster["access_point"], "reader") as consumer:
            found, offset = [], 0
            while True:
                result = consumer.pull(topic, 0, offset, 256)
                if not result.messages:
                    return found
                found += [message.body for message in result.messages]
                offset = result.next_offset


@contextmanager
def started_group(directory: Path, controllers: int, **options) -> Iterator[Group]:
    """A controller-mode cluster of one group of three (`quorumq up` with SETS and LocalCluster's
    other options) as a Group; every process stops when the block ends, whatever happened."""
    cluster = LocalCluster(directory, replicas=3, controllers=controllers, sets=SETS, **options)
    try:
        group = Group(cluster.start(timeout=90))
        group.cluster_file = cluster.directory / "cluster.json"
        try:
            yield group
        finally:
            group.close()
    finally:
        cluster.stop()
