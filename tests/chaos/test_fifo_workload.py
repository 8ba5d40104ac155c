"""How W6 ends so that C12 judges all it sent: its producers leave the drain a bounded backlog (with
failures holding their queues, consumers settle far fewer values a second than unthrottled producers
send), the drain waits while values settle, and the DLQ reader stops after the consumers."""

import threading
import time
from types import SimpleNamespace

import workload as workload_module
from harness import check_for
from history import History, read_history
from workload import DLQ_READER, FIFO_BACKLOG_MAX, FifoWorkload


class AcknowledgingProducer:
    """The official producer's calls W6 makes, each send acknowledged at once."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, message, transaction=None) -> SimpleNamespace:
        self.sent += 1
        return SimpleNamespace(message_id=f"id-{self.sent}", offset=self.sent)

    def shutdown(self) -> None:
        pass


def test_the_producers_wait_while_the_backlog_is_full(tmp_path):
    workload = FifoWorkload("127.0.0.1:1", History(tmp_path / "history.jsonl"), seed=1)
    producer = AcknowledgingProducer()
    thread = threading.Thread(target=workload._produce, args=(0, producer), daemon=True)
    thread.start()
    try:
        check_for(30, 0.05, lambda: producer.sent >= FIFO_BACKLOG_MAX, "the backlog full")
        with workload._lock:  # a consumer acks one: room for one more send
            workload._settled.add("g0-0")
        check_for(30, 0.05, lambda: producer.sent >= FIFO_BACKLOG_MAX + 1, "one more send")
    finally:
        workload.halt()
        thread.join(10)
    assert not thread.is_alive()
    assert producer.sent == FIFO_BACKLOG_MAX + 1


class DeadLetterQueue:
    """A SimpleConsumer of the DLQ: each receive long-polls briefly for what `dead_letter` put."""

    def __init__(self, stopped: threading.Event) -> None:
        self.consumer_group = "DLQ"
        self._stopped = stopped
        self.receives_after_stop = 0
        self._letters: list[SimpleNamespace] = []
        self._arrived = threading.Condition()

    def dead_letter(self, value: str) -> None:
        with self._arrived:
            self._letters.append(SimpleNamespace(body=value.encode(), message_id=value, queue_id=0,
                                                 queue_offset=0, delivery_attempt=1))
            self._arrived.notify_all()

    def receive(self, count: int, invisible_s: int) -> list[SimpleNamespace]:
        with self._arrived:
            self._arrived.wait_for(lambda: self._letters, timeout=0.05)
            self.receives_after_stop += self._stopped.is_set()
            letters, self._letters = self._letters, []
            return letters

    def ack(self, message) -> None:
        pass

    def shutdown(self) -> None:
        pass


def test_a_dead_letter_written_by_a_receive_in_flight_at_the_halt_is_read(tmp_path):
    """A consumer's receive in flight as the run halts may dead-letter a spent message; the DLQ
    reader stops only after the consumers, so the checker sees it dead-lettered, not lost."""
    workload = FifoWorkload("127.0.0.1:1", History(tmp_path / "history.jsonl"), seed=1)
    dlq = DeadLetterQueue(workload._stop)

    def consumer_in_flight() -> None:  # its receive ends after the halt, dead-lettering g0-0
        workload._stop.wait()
        check_for(5, 0.01, lambda: dlq.receives_after_stop >= 2, "the reader still reading")
        dlq.dead_letter("g0-0")

    workload._spawn("fifo-c0.0", consumer_in_flight)
    workload._spawn(DLQ_READER, workload._read_dead_letters, dlq)
    workload.halt()
    assert workload.error is None
    with workload._lock:
        assert "g0-0" in workload._settled


def drained(path) -> dict:
    """The drain's completion record in the history."""
    [record] = [r for r in read_history(path) if r.get("f") == "fifo-drain" and r["type"] != "invoke"]
    return record


def test_the_drain_goes_on_while_values_settle_and_ends_when_none_does(tmp_path, monkeypatch):
    """A queue behind several poison values settles slowly but settles: the drain waits for it
    past DRAIN_IDLE_S in all; a queue held for good settles nothing, and the drain ends."""
    monkeypatch.setattr(workload_module, "DRAIN_IDLE_S", 1.0)
    values = [f"g0-{seq}" for seq in range(8)]

    slow = FifoWorkload("127.0.0.1:1", History(tmp_path / "slow.jsonl"), seed=1)
    slow._sent.update(values)

    def settle_slowly() -> None:  # a value every 0.3 s: 2.4 s in all, each within DRAIN_IDLE_S of the last
        for value in values:
            time.sleep(0.3)
            with slow._lock:
                slow._settled.add(value)

    slow._spawn("fifo-c0.0", settle_slowly)
    started = time.monotonic()
    slow.stop()
    assert drained(tmp_path / "slow.jsonl")["type"] == "ok"
    assert time.monotonic() - started > 2 * workload_module.DRAIN_IDLE_S

    stuck = FifoWorkload("127.0.0.1:1", History(tmp_path / "stuck.jsonl"), seed=1)
    stuck._sent.update(values)
    stuck.stop()
    record = drained(tmp_path / "stuck.jsonl")
    assert record["type"] == "info" and record["unsettled"] == len(values)
