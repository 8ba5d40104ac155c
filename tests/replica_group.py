"""A replica group as a user sees it: one broker name's master and slaves, an admin client and a
producer, brokerStatus, and the way back to every replica running and in sync after a test's faults.
`ReplicaGroupBase` holds what both modes share; `ReplicaGroup` is a static-role group (`quorumq up
--replicas N`, no controller), shared by the quorum and degradation tests; tests/controller_group.py
holds the controller-mode `Group`."""

import os
import signal
import time
import uuid

from rocketmq.grpc_protocol import definition_pb2 as v5

from harness import check_for, pid_alive, resume, start_process, stop_process, v5_message, v5_send
from quorumq.client import AdminClient, Blocking, Credentials, Message, Producer, PullConsumer, SendResult

SETTLE_S = 60.0  # restarting replicas and letting the master count them in sync again


def new_topic() -> str:
    return f"T{uuid.uuid4().hex[:10]}"


class ReplicaGroupBase:
    """What a static-role and a controller-mode group share. A mode says which broker is master
    now (`current_master`), where a new topic is made (`topic_brokers`), which processes a restore
    brings back (`restartable`), what it waits for before the group counts as in sync again
    (`settle`) and when the group is in sync (`in_sync`)."""

    def __init__(self, cluster: dict, admin_timeout_s: float, send_timeout_s: float | None = None,
                 credentials: Credentials | None = None) -> None:
        self.cluster = cluster
        self.credentials = credentials  # every call signed with them (a cluster with authenticationEnabled)
        self.admin = Blocking(AdminClient, cluster["access_point"], timeout_s=admin_timeout_s, credentials=credentials)
        timeout = {} if send_timeout_s is None else {"timeout_s": send_timeout_s}
        self.producer = Blocking(Producer, cluster["access_point"], credentials=credentials, **timeout)

    def close(self) -> None:
        self.producer.close()
        self.admin.close()

    # What a mode says.

    def current_master(self) -> dict:
        raise NotImplementedError

    def topic_brokers(self) -> list[dict]:
        raise NotImplementedError

    def restartable(self) -> list[dict]:
        raise NotImplementedError

    def settle(self) -> None:
        raise NotImplementedError

    def in_sync(self, **expected: object) -> dict | None:
        raise NotImplementedError

    # What the user looks at.

    def status(self, process: dict | None = None) -> dict[str, str]:
        """brokerStatus of the process, the master by default."""
        return self.admin.broker_status((process or self.current_master())["address"])

    def status_shows(self, process: dict | None = None, **expected: object) -> dict | None:
        """brokerStatus if every expected key shows the expected value, else None."""
        status = self.status(process)
        return status if all(status[key] == str(value) for key, value in expected.items()) else None

    def wait_status(self, timeout: float = SETTLE_S, process: dict | None = None, **expected: object) -> dict:
        """Poll brokerStatus until every expected key shows the expected value."""
        return check_for(timeout, 0.1, lambda: self.status_shows(process, **expected), f"brokerStatus {expected}")

    def wait_in_sync(self, timeout: float = SETTLE_S, **expected: object) -> dict:
        """The group in sync as its mode defines it, and the master's brokerStatus showing `expected`."""
        return check_for(timeout, 0.1, lambda: self.in_sync(**expected), "every replica in sync")

    def wait_caught_up(self, slave: dict, master: dict | None = None) -> int:
        """Wait until the slave's commit log ends where the master's (the current one by default)
        does; returns that offset."""
        master = master or self.current_master()

        def same_end() -> int | None:
            end = self.log_end(master)
            return end if self.log_end(slave) == end else None
        return check_for(SETTLE_S, 0.1, same_end, "the slave caught up with the master")

    def log_end(self, process: dict | None = None) -> int:
        return int(self.status(process)["commitLogMaxOffset"])

    def queue_max(self, topic: str) -> int:
        [progress] = self.admin.consumer_progress("probe", topic)
        [queue] = [q for q in progress.queues if q.topic == topic and q.queue_id == 0]
        return queue.max_offset

    def configure(self, **keys: object) -> None:
        """Change live keys on the master (quorumq admin updateBrokerConfig -b MASTER)."""
        address = self.current_master()["address"]
        for key, value in keys.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            self.admin.update_broker_config(key, text, address=address)

    def new_topic(self) -> str:
        """A topic of one queue, so every send lands in queue 0."""
        topic = new_topic()
        for broker in self.topic_brokers():
            self.admin.update_topic(broker["address"], topic, read_queue_nums=1, write_queue_nums=1)
        return topic

    def assert_no_topic_made(self, refused: str, topic_count: str) -> None:
        """After a send to the new topic `refused` was refused: the master still holds `topic_count`
        topics, and once a send to another new topic has made and registered that one, the name
        server does not list `refused`. (A route it would give: with autoCreateTopicEnable, any
        topic is routed to the brokers that would make it.) The master must take sends by then."""
        assert self.status()["topicCount"] == topic_count, f"the refused send made {refused}"
        made = new_topic()
        response = v5_send(self.current_master()["address"], v5_message(made, b"made"))
        assert response.status.code == v5.Code.OK, response.status
        listed = check_for(SETTLE_S, 0.1, lambda: made in (names := self.admin.topic_list()) and names,
                           f"{made} registered")
        assert refused not in listed, f"the refused send made {refused}"

    def send_message(self, topic: str, body: bytes) -> SendResult:
        """One send to queue 0."""
        return self.producer.send(topic, Message(body), queue_id=0)

    def bodies(self, topic: str) -> list[bytes]:
        """Every message of the topic's queue 0, as its master serves it."""
        with Blocking(PullConsumer, self.cluster["access_point"], "reader", credentials=self.credentials) as consumer:
            found, offset = [], 0
            while True:
                result = consumer.pull(topic, 0, offset, 256)
                if not result.messages:
                    return found
                found += [message.body for message in result.messages]
                offset = result.next_offset

    # Faults, and the way back.

    def kill(self, *processes: dict) -> None:
        for process in processes:
            stop_process(process, signal.SIGKILL)

    def restore(self, **expected: object) -> None:
        """Every restartable process running (restarted, or continued after SIGSTOP), the mode's
        settling done, the group in sync (and the master's brokerStatus showing `expected`)."""
        for process in self.restartable():
            if pid_alive(process["pid"]):
                resume(process)
            else:
                start_process(process)
        self.settle()
        self.wait_in_sync(**expected)


class ReplicaGroup(ReplicaGroupBase):
    """One broker name's master and slaves with static roles. `baseline` holds the live keys every
    test starts from; `restore` puts them back."""

    def __init__(self, cluster: dict, baseline: dict[str, object] | None = None, broker_name: str = "broker-a",
                 send_timeout_s: float | None = None, credentials: Credentials | None = None) -> None:
        super().__init__(cluster, admin_timeout_s=5.0, send_timeout_s=send_timeout_s, credentials=credentials)
        brokers = sorted((p for p in cluster["processes"] if p.get("broker_name") == broker_name),
                         key=lambda p: p["broker_id"])
        self.master, self.slaves = brokers[0], brokers[1:]
        self.baseline = baseline or {}

    @property
    def slave(self) -> dict:
        """The slave of a group of two."""
        [slave] = self.slaves
        return slave

    @property
    def size(self) -> int:
        return 1 + len(self.slaves)

    def slave_ids(self, *slaves: dict) -> str:
        """How brokerStatus lists these slaves."""
        return ",".join(str(slave["broker_id"]) for slave in slaves)

    def current_master(self) -> dict:
        return self.master

    def topic_brokers(self) -> list[dict]:
        return [self.master]  # slaves copy topics from the master

    def restartable(self) -> list[dict]:
        return self.slaves

    def settle(self) -> None:
        self.configure(**self.baseline)

    def in_sync(self, **expected: object) -> dict | None:
        """The master lists every slave and counts them all in sync: its brokerStatus."""
        return self.status_shows(slaves=self.slave_ids(*self.slaves), inSyncReplicas=self.size, **expected)

    def wait_slave_gone(self, slave: dict, timeout: float = 10.0) -> None:
        check_for(timeout, 0.05, lambda: str(slave["broker_id"]) not in self.status()["slaves"].split(","),
                  "the master noticed the slave is gone")

    def send(self, topic: str, size: int = 64) -> tuple[SendResult, float]:
        """One send of `size` random bytes to queue 0: (SendResult, seconds it took)."""
        started = time.monotonic()
        result = self.send_message(topic, os.urandom(size))
        return result, time.monotonic() - started

    def continue_slaves(self) -> None:
        for slave in self.slaves:
            resume(slave)
