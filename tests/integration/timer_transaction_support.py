"""What the timer and transaction tests share (issue 21): a consumer that records when each message
arrives, a transaction checker that answers by the message's body, the copies a topic holds, and
the timer figures of brokerStatus."""

import threading
import time
from collections import Counter

from rocketmq import Producer, TransactionChecker, TransactionResolution

from harness import check_for, new_name, official_message, simple_consumer
from quorumq.client import Blocking, PullConsumer

UNKNOWN = TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
COMMIT = TransactionResolution.COMMIT
ROLLBACK = TransactionResolution.ROLLBACK
# brokerStatus figures of the timers: their sum counts every timer the broker ever stored.
TIMER_FIGURES = ("timersPending", "timersDelivered", "timersRecalled")


def now_ms() -> int:
    return int(time.time() * 1000)


def timer_message(topic: str, body: bytes, due_ms: int):
    """A delay message as the official client takes it: the delivery time in ms (spec grpc-client.md)."""
    message = official_message(topic, body)
    message.delivery_timestamp = due_ms
    return message


def timers_stored(status: dict[str, str]) -> int:
    return sum(int(status[name]) for name in TIMER_FIGURES)


class Arrivals:
    """A SimpleConsumer of a group of its own on one topic, receiving in a thread: each message is
    acked and kept with the wall-clock time (ms) its receive returned. A receive that fails (a
    broker being killed or restarted) is tried again."""

    def __init__(self, client_config, topic: str, await_s: int = 1) -> None:
        self.consumer = simple_consumer(client_config, new_name("G"), topic, await_duration=await_s)
        self.lock = threading.Lock()
        self.arrived: dict[str, list[tuple[int, object]]] = {}  # message id -> [(arrival ms, message)]
        self.rounds = 0  # receives that returned, with or without messages
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"arrivals-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self.consumer.receive(32, 30)
            except Exception:  # noqa: BLE001 - the client raises its own types while a broker is away
                self._stop.wait(0.1)
                continue
            at = now_ms()
            for message in messages:
                with self.lock:
                    self.arrived.setdefault(message.message_id, []).append((at, message))
                try:
                    self.consumer.ack(message)
                except Exception:  # noqa: BLE001 - an unacked message comes back: counted twice, as it should
                    pass
            with self.lock:
                self.rounds += 1

    def of(self, message_id: str) -> list[tuple[int, object]]:
        with self.lock:
            return list(self.arrived.get(message_id, ()))

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [message.body for deliveries in self.arrived.values() for _, message in deliveries]

    def wait_for(self, message_ids, timeout: float) -> dict[str, list[tuple[int, object]]]:
        """Every one of the messages arrived at least once: their arrivals."""
        def all_arrived():
            with self.lock:
                return all(i in self.arrived for i in message_ids) and {i: list(self.arrived[i]) for i in message_ids}
        return check_for(timeout, 0.05, all_arrived, f"{len(message_ids)} messages arrived")

    def wait_rounds(self, count: int = 2, timeout: float = 30.0) -> None:
        """Until `count` more receives have returned: the later one began after this call, so
        whatever was visible by then has arrived."""
        with self.lock:
            target = self.rounds + count
        check_for(timeout, 0.05, lambda: self.rounds >= target, f"{count} more receives")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.shutdown()


class ScriptedChecker(TransactionChecker):
    """Answers a check by the message's body: its script's answers in turn, the last repeating
    (UNKNOWN for a body not in the script). Records each check: (body, message id, time)."""

    def __init__(self, script: dict[bytes, list] | None = None) -> None:
        self.script = script or {}
        self.lock = threading.Lock()
        self.checks: list[tuple[bytes, str, float]] = []

    def check(self, message):
        with self.lock:
            made = sum(1 for body, _, _ in self.checks if body == message.body)
            self.checks.append((message.body, message.message_id, time.time()))
        answers = self.script.get(message.body, [UNKNOWN])
        return answers[min(made, len(answers) - 1)]

    def of(self, body: bytes) -> list[tuple[bytes, str, float]]:
        with self.lock:
            return [check for check in self.checks if check[0] == body]


def transactional_producer(client_config, topics: tuple[str, ...], checker: TransactionChecker) -> Producer:
    """A started official Producer that publishes `topics` (how the broker finds it for a check)."""
    producer = Producer(client_config, topics, checker)
    producer.startup()
    return producer


def stored_message_ids(access_point: str, topic: str) -> Counter:
    """How many times each message id is stored in the topic, read from its master's queues (what
    any consumer group would be delivered, without the redeliveries a failover causes)."""
    stored: Counter = Counter()
    with Blocking(PullConsumer, access_point, new_name("reader")) as consumer:
        for queue in consumer.queues(topic):
            offset = 0
            while messages := (result := consumer.pull(topic, queue.queue_id, offset, 256)).messages:
                stored.update(message.message_id for message in messages)
                offset = result.next_offset
    return stored
