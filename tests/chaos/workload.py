"""W1 of the reliability spec: producers that send unique values, one send in flight each, and write
every send to the history (invoke, then ok, fail or info) so the checkers can judge the cluster."""

from __future__ import annotations

import asyncio
import threading

from history import History
from quorumq.client import ClientError, Message, Producer

SEND_TIMEOUT_S = 5.0
# Refusals that say the message was not stored; every other error leaves it unknown ("info").
DEFINITE_REFUSALS = frozenset({"TOPIC_NOT_FOUND", "NO_PERMISSION", "MESSAGE_ILLEGAL", "BAD_REQUEST"})


class Producers:
    """`count` producers in one thread of their own; each sends `p<i>-<seq>` values one at a time,
    every `pause_s`, and sends a value again once after an unknown outcome."""

    def __init__(self, access_point: str, topic: str, history: History, count: int = 4,
                 pause_s: float = 0.02) -> None:
        self.access_point, self.topic, self.history = access_point, topic, history
        self.count, self.pause_s = count, pause_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="producers", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def halt(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def stop(self) -> None:
        """Halt, and raise what made a producer fail."""
        self.halt()
        if self._thread.is_alive():
            raise RuntimeError("the producers did not stop")
        if self.error:
            raise RuntimeError("a producer failed") from self.error

    async def _run(self) -> None:
        try:
            await asyncio.gather(*(self._produce(f"p{index}") for index in range(self.count)))
        except BaseException as error:  # surfaced by stop()
            self.error = error

    async def _produce(self, name: str) -> None:
        async with Producer(self.access_point, timeout_s=SEND_TIMEOUT_S, retry_s=SEND_TIMEOUT_S) as producer:
            sequence = 0
            while not self._stop.is_set():
                value = f"{name}-{sequence}"
                if not await self._send(producer, name, value):
                    await self._send(producer, name, value)  # the retry C4 allows to duplicate
                sequence += 1
                await asyncio.sleep(self.pause_s)

    async def _send(self, producer: Producer, name: str, value: str) -> bool:
        """One send, recorded; whether it was acknowledged or definitely refused."""
        op = self.history.invoke(name, "send", value)
        try:
            result = (await producer.send_batch(self.topic, [Message(value.encode())]))[0]
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
