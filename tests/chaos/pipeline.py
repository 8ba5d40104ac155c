"""F14 and W5 of the reliability spec: the replicator (`quorumq replicator run --dedupe`, a Spark
driver in local mode) copies the chaos topic from the group under test (cluster A) to a standby of
one broker (cluster B) while the nemesis kills the driver, fails A's master over, or stops B. Its
checkpoint job translates one consumer group's offsets to B, and a watch records them.

The driver is restarted on its checkpoint as a supervisor would restart it: at heal after a kill,
and whenever it is found gone (with its failure policy `fail`, a standby that stays down ends the
driver after bounded retries)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from controller_group import Group
from final_read import read_replica
from harness import TEST_SEGMENT_BYTES, Driver, LocalCluster, check_for, create_topic
from history import History
from nemesis import kill_master, paused
from network import Network
from quorumq.client import AdminClient, Blocking, ClientError, PullConsumer
from workload import Workload

STANDBY = "Standby"
DRAIN_S = 180.0  # how long the standby may take to hold every message of the source after the heal
TRIGGER_S = 0.5
CHECKPOINT_S = 2.0  # how often the checkpoint job translates the group's offsets
WATCH_S = 1.0


class Pipeline:
    """Cluster B and the driver replicating `topic` from cluster A into it."""

    def __init__(self, directory: Path, source_access_point: str, topic: str, queues: int, group: str,
                 history: History) -> None:
        self.directory, self.topic, self.queues, self.group, self.history = directory, topic, queues, group, history
        self.source_access_point = source_access_point
        self.standby = LocalCluster(directory / "standby", cluster=STANDBY)
        self.args = ["--source", source_access_point, "--topics", topic, "--checkpoint", str(directory / "checkpoint"),
                     "--starting", "earliest", "--spark-master", "local[1]", "--dedupe",
                     "--trigger-seconds", str(TRIGGER_S), "--groups", group, "--checkpoint-seconds", str(CHECKPOINT_S)]
        self.info: dict | None = None
        self.driver: Driver | None = None
        self.watch: TranslatedOffsets | None = None
        self._starts = 0

    def start(self) -> None:
        self.info = self.standby.start()
        create_topic(self.info, self.topic, self.queues)
        self.args += ["--target", self.info["access_point"]]
        self._start_driver()
        self.watch = TranslatedOffsets(self.info["access_point"], self.topic, self.group, self.history)
        self.watch.start()

    def _start_driver(self) -> None:
        self._starts += 1
        self.driver = Driver(self.args, self.directory / f"driver-{self._starts}.log")

    def keep_driver(self) -> None:
        """Start the driver again if it is gone."""
        if self.driver.process.poll() is not None:
            self.history.invoke("nemesis", "driver-restart", self.driver.process.returncode)
            self.driver.kill()
            self._start_driver()

    @property
    def standby_broker(self) -> dict:
        return next(p for p in self.info["processes"] if p["kind"] == "broker")

    def fault(self, group: Group, network: Network, rng: random.Random):
        """F14: SIGKILL the driver (mid micro-batch, as a trigger is every 0.5 s), fail over the
        source's master (SIGKILL), or stop the standby's broker (SIGSTOP) for the held time."""
        kind = rng.choice(["kill-driver", "fail-over-source", "standby-down"])
        if kind == "kill-driver":
            self.driver.kill()
            return kind, self._start_driver
        if kind == "fail-over-source":
            target, heal = kill_master(group, network, rng)
            return f"{kind} {target}", heal
        return kind, paused(self.standby_broker)

    def drain(self) -> float:
        """Wait until the standby's queues hold as many messages as the source's (whose producers
        have stopped); the seconds it took."""
        started = time.monotonic()
        messages = self._messages(self.source_access_point)

        def held() -> bool:
            self.keep_driver()
            return self._messages(self.info["access_point"]) >= messages

        check_for(DRAIN_S, 1.0, held, "the standby holding every message of the source")
        return round(time.monotonic() - started, 3)

    def _messages(self, access_point: str) -> int:
        """How many messages the topic's queues hold on the cluster at `access_point`."""
        with Blocking(PullConsumer, access_point, "chaos-drain") as consumer:
            return sum(consumer.query_offset(self.topic, q, "END") for q in range(self.queues))

    def close(self) -> None:
        """Stop the driver (SIGTERM, then its whole process group) and the standby; then raise
        what made the watch fail, if anything did (its checker would judge too little)."""
        try:
            if self.watch is not None:
                self.watch.halt()
            if self.driver is not None:
                self.driver.stop()
        finally:
            self.standby.stop()
        if self.watch is not None:
            self.watch.stop()

    def final_read(self) -> dict[str, list[tuple[int, str]]]:
        """The standby's queues, read offline once it is closed."""
        broker = self.standby_broker
        return read_replica(Path(broker["data_dir"]), self.topic, broker["broker_name"], TEST_SEGMENT_BYTES)


class TranslatedOffsets(Workload):
    """The checkpoint job's work as a user of the standby sees it: every WATCH_S, the group's
    committed offsets of the topic on the standby ("translated": value the group; ok adds
    offsets {"<broker>:<queue id>": offset}, the queues it has committed)."""

    def __init__(self, access_point: str, topic: str, group: str, history: History) -> None:
        super().__init__("translated-offsets")
        self.access_point, self.topic, self.group, self.history = access_point, topic, group, history

    async def _run(self) -> None:
        async with AdminClient(self.access_point, timeout_s=WATCH_S) as admin:
            while not self._stop.is_set():
                op = self.history.invoke("checkpoint-watch", "translated", self.group)
                try:
                    progress = await admin.consumer_progress(self.group, self.topic)
                except ClientError as error:  # the standby stopped (F14's standby-down)
                    self.history.fail(op, error.name)
                else:
                    self.history.ok(op, offsets={f"{broker.broker_name}:{queue.queue_id}": queue.consumer_offset
                                                 for broker in progress for queue in broker.queues
                                                 if queue.consumer_offset >= 0})
                await asyncio.sleep(WATCH_S)
