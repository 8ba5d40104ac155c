"""W6's producers leave its drain a bounded backlog: with failures holding their queues, consumers
settle far fewer values a second than unthrottled producers send."""

import threading
from types import SimpleNamespace

from harness import check_for
from history import History
from workload import DLQ_READER, FIFO_BACKLOG_MAX, FifoWorkload


class AcknowledgingProducer:
    """The official producer's calls W6 makes, each send acknowledged at once."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, message) -> SimpleNamespace:
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
