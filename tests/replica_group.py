"""A static-role replica group (`quorumq up --replicas N`, no controller) as a user sees it: one
broker name's master and slaves from cluster.json, an admin client and a producer, brokerStatus,
the live quorum keys, and the way back to every slave running and in sync after a test's faults.
Shared by the quorum and degradation tests; tests/controller_group.py is its controller-mode peer."""

import os
import signal
import time
import uuid

from harness import check_for, pid_alive, resume, start_process, stop_process
from quorumq.client import AdminClient, Blocking, Message, Producer

SETTLE_S = 60.0  # restarting slaves and letting the master count them in sync again


def new_topic() -> str:
    return f"T{uuid.uuid4().hex[:10]}"


class ReplicaGroup:
    """One broker name's master and slaves, with an admin client and a producer. `baseline` holds the
    live keys every test starts from; `restore` puts them back."""

    def __init__(self, cluster: dict, baseline: dict[str, object] | None = None, broker_name: str = "broker-a",
                 send_timeout_s: float | None = None) -> None:
        self.cluster = cluster
        brokers = sorted((p for p in cluster["processes"] if p.get("broker_name") == broker_name),
                         key=lambda p: p["broker_id"])
        self.master, self.slaves = brokers[0], brokers[1:]
        self.baseline = baseline or {}
        self.admin = Blocking(AdminClient, cluster["access_point"], timeout_s=5.0)
        timeout = {} if send_timeout_s is None else {"timeout_s": send_timeout_s}
        self.producer = Blocking(Producer, cluster["access_point"], **timeout)

    def close(self) -> None:
        self.producer.close()
        self.admin.close()

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

    # What the user looks at.

    def status(self, process: dict | None = None) -> dict[str, str]:
        return self.admin.broker_status((process or self.master)["address"])

    def wait_status(self, timeout: float = SETTLE_S, process: dict | None = None, **expected: object) -> dict:
        """Poll brokerStatus until every expected key shows the expected value."""
        def matches() -> dict | None:
            status = self.status(process)
            return status if all(status[key] == str(value) for key, value in expected.items()) else None
        return check_for(timeout, 0.1, matches, f"brokerStatus {expected}")

    def wait_in_sync(self, timeout: float = SETTLE_S, **expected: object) -> dict:
        """The master lists every slave and counts them all in sync (and shows `expected` too)."""
        return self.wait_status(timeout, slaves=self.slave_ids(*self.slaves), inSyncReplicas=self.size, **expected)

    def wait_slave_gone(self, slave: dict, timeout: float = 10.0) -> None:
        check_for(timeout, 0.05, lambda: str(slave["broker_id"]) not in self.status()["slaves"].split(","),
                  "the master noticed the slave is gone")

    def wait_caught_up(self, slave: dict) -> int:
        """Wait until the slave's commit log ends where the master's does; returns that offset."""
        def same_end() -> int | None:
            end = self.log_end()
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
        for key, value in keys.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            self.admin.update_broker_config(key, text, address=self.master["address"])

    def new_topic(self) -> str:
        """A topic of one queue on the master, so every send lands in queue 0."""
        topic = new_topic()
        self.admin.update_topic(self.master["address"], topic, read_queue_nums=1, write_queue_nums=1)
        return topic

    def send(self, topic: str, size: int = 64):
        """One send to queue 0: (SendResult, seconds it took)."""
        started = time.monotonic()
        result = self.producer.send(topic, Message(os.urandom(size)), queue_id=0)
        return result, time.monotonic() - started

    # Faults, and the way back.

    def kill(self, *slaves: dict) -> None:
        for slave in slaves:
            stop_process(slave, signal.SIGKILL)

    def continue_slaves(self) -> None:
        for slave in self.slaves:
            resume(slave)

    def restore(self, **expected: object) -> None:
        """Every slave running (restarted, or continued after SIGSTOP), the live keys at their
        baseline, every slave connected and in sync (and brokerStatus showing `expected`)."""
        for slave in self.slaves:
            if pid_alive(slave["pid"]):
                resume(slave)
            else:
                start_process(slave)
        self.configure(**self.baseline)
        self.wait_in_sync(**expected)
