"""The workloads of the reliability spec, each in a thread of its own, writing every operation to
the history (invoke, then ok, fail or info) so the checkers can judge the cluster:

- W1, producers that send unique values, one send in flight each;
- W3, the same producers made idempotent: a value keeps its message id and its queue when it is
  sent again after an unknown outcome, until it is acknowledged, so it must be stored once;
- W2, consumer groups that pull, commit after processing and are rebalanced now and then;
- W4, admin churn: topics made, written and deleted in turn, names used again."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid

from history import History
from quorumq.client import AdminClient, ClientError, Message, Producer, PullConsumer

SEND_TIMEOUT_S = 5.0
# Refusals that say the message was not stored; every other error leaves it unknown ("info").
DEFINITE_REFUSALS = frozenset({"TOPIC_NOT_FOUND", "NO_PERMISSION", "MESSAGE_ILLEGAL", "BAD_REQUEST"})
CONSUMER_TIMEOUT_S = 5.0
REBALANCE_S = 30.0
PULL_BATCH = 32
RETRY_PAUSE_S = 0.2
CHURN_TOPICS = ("ChurnA", "ChurnB")
CHURN_PERIOD_S = 3.0  # one topic made or deleted this often: a low rate beside the producers
CHURN_SENDS = 5  # values sent to a topic each time it is made


class Workload:
    """Runs `_run()` in a thread of its own until halted."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._guarded()), name=name, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def halt(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def stop(self) -> None:
        """Halt, and raise what made the workload fail."""
        self.halt()
        if self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} did not stop")
        if self.error:
            raise RuntimeError(f"{self._thread.name} failed") from self.error

    async def _guarded(self) -> None:
        try:
            await self._run()
        except BaseException as error:  # surfaced by stop()
            self.error = error

    async def _run(self) -> None:
        raise NotImplementedError


class Producers(Workload):
    """W1: `count` producers; each sends `p<i>-<seq>` values one at a time, every `pause_s`, and
    sends a value again once after an unknown outcome, as a new message (a new id).

    W3 (`queues` given): producer i sends to queue i % queues, each value with a message id of
    the producer's id and the sequence, and sends it again with that id after each unknown
    outcome (pausing RETRY_PAUSE_S) until it is acknowledged or refused: the broker stores it once.
    Its sends are recorded `idempotent`, so C4 allows none of its values twice."""

    def __init__(self, access_point: str, topic: str, history: History, count: int = 4,
                 pause_s: float = 0.02, queues: int | None = None) -> None:
        super().__init__("producers")
        self.access_point, self.topic, self.history = access_point, topic, history
        self.count, self.pause_s, self.queues = count, pause_s, queues

    async def _run(self) -> None:
        await asyncio.gather(*(self._produce(f"p{index}", index) for index in range(self.count)))

    async def _produce(self, name: str, index: int) -> None:
        producer_id = uuid.uuid4().hex[:16].upper()
        queue_id = None if self.queues is None else index % self.queues
        async with Producer(self.access_point, timeout_s=SEND_TIMEOUT_S, retry_s=SEND_TIMEOUT_S) as producer:
            sequence = 0
            while not self._stop.is_set():
                value = f"{name}-{sequence}"
                if queue_id is None:
                    if not await self._send(producer, name, Message(value.encode())):
                        await self._send(producer, name, Message(value.encode()))  # the retry C4 allows to duplicate
                else:
                    message = Message(value.encode(), message_id=f"{producer_id}{sequence:016X}")
                    while not await self._send(producer, name, message, queue_id) and not self._stop.is_set():
                        await asyncio.sleep(RETRY_PAUSE_S)
                sequence += 1
                await asyncio.sleep(self.pause_s)

    async def _send(self, producer: Producer, name: str, message: Message, queue_id: int | None = None) -> bool:
        """One send, recorded; whether it was acknowledged or definitely refused."""
        value = message.body.decode()
        op = self.history.invoke(name, "send", value, **({} if queue_id is None else {"idempotent": True}))
        try:
            result = (await producer.send_batch(self.topic, [message], queue_id))[0]
        except ClientError as error:
            if error.name in DEFINITE_REFUSALS:
                self.history.fail(op, error.name)
                return True
            self.history.info(op, error.name)
            return False
        if result.status != "SEND_OK":  # stored on the master at least, maybe more
            self.history.info(op, result.status)
            return False
        self.history.ok(op, queue=f"{result.broker_name}:{result.queue_id}", offset=result.queue_offset,
                        epoch=result.master_epoch, broker=result.broker_name, attempts=result.attempts)
        return True


class Consumers(Workload):
    """W2: `groups` consumer groups of two consumers each share the topic's queues; a consumer
    reads a queue's committed offset when it takes the queue ("position"), pulls, and commits
    the offset after what it read ("commit"). Every REBALANCE_S the queues change hands; a queue
    is worked by one consumer at a time, and a consumer that lost a queue, or an answer, reads
    the committed offset again before it goes on."""

    def __init__(self, access_point: str, topic: str, queues: int, history: History, groups: int = 2) -> None:
        super().__init__("consumers")
        self.access_point, self.topic, self.queues, self.history = access_point, topic, queues, history
        self.groups = [f"chaos-group-{index}" for index in range(groups)]
        self._shift = 0  # consumer c of a group works the queues q with (q + shift) % 2 == c
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}  # one consumer on a queue at a time

    def _owner(self, queue: int) -> int:
        return (queue + self._shift) % 2

    async def _run(self) -> None:
        self._locks = {(group, queue): asyncio.Lock() for group in self.groups for queue in range(self.queues)}
        consumers = [self._consume(group, index) for group in self.groups for index in range(2)]
        await asyncio.gather(self._rebalance(), *consumers)

    async def _rebalance(self) -> None:
        next_at = time.monotonic() + REBALANCE_S
        while not self._stop.is_set():  # looked at often: a halt must not wait out a rebalance period
            await asyncio.sleep(RETRY_PAUSE_S)
            if time.monotonic() >= next_at:
                self._shift += 1
                next_at += REBALANCE_S

    async def _consume(self, group: str, index: int) -> None:
        name = f"{group}/c{index}"
        positions: dict[int, int] = {}  # queue -> where this consumer goes on reading
        shift = self._shift  # the assignment `positions` were read under
        async with PullConsumer(self.access_point, group, timeout_s=CONSUMER_TIMEOUT_S) as consumer:
            for queue in itertools.cycle(range(self.queues)):
                if self._stop.is_set():
                    return
                async with self._locks[group, queue]:
                    if shift != self._shift:  # the queues changed hands, maybe away and back: read again
                        positions.clear()
                        shift = self._shift
                    if self._owner(queue) != index:
                        await asyncio.sleep(0)
                        continue
                    if not await self._step(consumer, name, group, queue, positions):
                        await asyncio.sleep(RETRY_PAUSE_S)

    async def _step(self, consumer: PullConsumer, name: str, group: str, queue: int,
                    positions: dict[int, int]) -> bool:
        """Position, pull and commit once on one queue; whether it went without error."""
        key = {"group": group, "queue": queue}
        if queue not in positions:
            op = self.history.invoke(name, "position", key)
            try:
                committed = await consumer.get_offset(self.topic, queue)
            except ClientError as error:
                self.history.fail(op, error.name)
                return False
            self.history.ok(op, offset=committed)
            positions[queue] = committed or 0
        try:
            result = await consumer.pull(self.topic, queue, positions[queue], PULL_BATCH, long_poll_s=0.5)
        except ClientError:
            return False
        if not result.messages:
            return True
        offset = result.next_offset
        op = self.history.invoke(name, "commit", {**key, "offset": offset})
        try:
            await consumer.commit_offset(self.topic, queue, offset)
        except ClientError as error:
            self.history.info(op, error.name)  # it may have been applied: read the position again
            positions.pop(queue, None)
            return False
        self.history.ok(op)
        positions[queue] = offset
        return True


class TopicChurn(Workload):
    """W4: every CHURN_PERIOD_S the next of CHURN_TOPICS is made (on every broker, one queue) and
    sent CHURN_SENDS values "<topic>/<life>-<i>", or deleted (`deleteTopic`) when it was made the
    turn before, so each name lives, dies and is made again during the faults. Recorded as
    create-topic and delete-topic (value: the topic; ok only when every broker applied it) and
    churn-send (with its topic), which C11 judges apart from the producers' sends."""

    def __init__(self, access_point: str, brokers: list[str], history: History) -> None:
        super().__init__("churn")
        self.access_point, self.brokers, self.history = access_point, brokers, history

    async def _run(self) -> None:
        lives = itertools.count()
        live: set[str] = set()
        async with AdminClient(self.access_point, timeout_s=SEND_TIMEOUT_S) as admin, \
                Producer(self.access_point, timeout_s=SEND_TIMEOUT_S, retry_s=SEND_TIMEOUT_S) as producer:
            for topic in itertools.cycle(CHURN_TOPICS):
                if self._stop.is_set():
                    return
                if topic in live:
                    live.discard(topic)
                    await self._admin("delete-topic", topic, admin.delete_topic(topic))
                else:
                    live.add(topic)
                    await self._admin("create-topic", topic, admin.update_topic_on(self.brokers, topic, 1, 1))
                    life = next(lives)
                    for index in range(CHURN_SENDS):
                        await self._send(producer, topic, f"{topic}/{life}-{index}")
                until = time.monotonic() + CHURN_PERIOD_S
                while time.monotonic() < until and not self._stop.is_set():
                    await asyncio.sleep(RETRY_PAUSE_S)

    async def _admin(self, f: str, topic: str, call) -> None:
        op = self.history.invoke("churn", f, topic)
        try:
            await call
        except ClientError as error:  # applied on some brokers, maybe on none
            self.history.info(op, error.name)
        else:
            self.history.ok(op)

    async def _send(self, producer: Producer, topic: str, value: str) -> None:
        op = self.history.invoke("churn", "churn-send", value, topic=topic)
        try:
            result = (await producer.send_batch(topic, [Message(value.encode())], 0))[0]
        except ClientError as error:
            (self.history.fail if error.name in DEFINITE_REFUSALS else self.history.info)(op, error.name)
            return
        if result.status == "SEND_OK":
            self.history.ok(op)
        else:
            self.history.info(op, result.status)
