"""W6's producers leave its drain a bounded backlog: with failures holding their queues, consumers
settle far fewer values a second than unthrottled producers send."""

import threading
from types import SimpleNamespace

from harness import check_for
from history import History
from workload import FIFO_BACKLOG_MAX, FifoWorkload


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
