"""A proxy's lines of sends: the messages of concurrent SendMessage calls to one broker group,
one topic and one signer, merged into one send to the broker (core/send_batches.py), as records
or as a v5 SendMessage (proxy/service.py). The answer has one entry per message, in order, so
each client call gets its own entries."""

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.core.send_batches import linger_s, split, take
from quorumq.protocol.v5 import send_answer

LineKey = tuple[str, str, str]  # broker group, topic, the caller's authorization header ('' for records)
# (line, merged request, its headers, its timeout) -> the broker's answer
Forward = Callable[[LineKey, v5s.SendMessageRequest, tuple, float | None], Awaitable[v5s.SendMessageResponse]]


@dataclass
class _Send:
    request: v5s.SendMessageRequest
    metadata: tuple
    timeout_s: float | None
    answer: asyncio.Future
    body_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.body_bytes = sum(len(message.body) for message in self.request.messages)


@dataclass
class _Line:
    waiting: deque[_Send] = field(default_factory=deque)
    calls: int = 0  # in flight to the broker
    merged: int = 1  # client calls the previous broker call carried


class SendLines:
    def __init__(self, forward: Forward, delay_s: float) -> None:
        self._forward = forward
        self._delay_s = delay_s  # batchMaxDelayMs
        self._lines: dict[LineKey, _Line] = {}
        self._calls: set[asyncio.Task] = set()  # referenced until done, as asyncio asks

    async def send(self, key: LineKey, request: v5s.SendMessageRequest, metadata: tuple,
                   timeout_s: float | None) -> v5s.SendMessageResponse:
        line = self._lines.setdefault(key, _Line())
        answer = asyncio.get_running_loop().create_future()
        line.waiting.append(_Send(request, metadata, timeout_s, answer))
        if line.calls < limits.PROXY_SEND_CALLS_PER_LINE:
            line.calls += 1
            call = asyncio.ensure_future(self._call(key, line))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)
        return await answer

    async def _call(self, key: LineKey, line: _Line) -> None:
        """Broker calls while sends wait; the line is dropped once nothing waits or flies."""
        try:
            while line.waiting:
                waiting = sum(len(send.request.messages) for send in line.waiting)
                if delay_s := linger_s(line.merged, waiting, limits.BATCH_MESSAGES_MAX, self._delay_s,
                                       limits.PROXY_LINGER_MERGED_CALLS_MIN):
                    await asyncio.sleep(delay_s)
                count = take([(len(send.request.messages), send.body_bytes) for send in line.waiting],
                             limits.BATCH_MESSAGES_MAX, limits.BATCH_BYTES_MAX)
                sends = [line.waiting.popleft() for _ in range(count)]
                line.merged = count
                await self._answer(key, sends)
        finally:
            line.calls -= 1
            if not line.calls and not line.waiting:
                self._lines.pop(key, None)

    async def _answer(self, key: LineKey, sends: list[_Send]) -> None:
        if len(sends) == 1:
            merged = sends[0].request
        else:
            merged = v5s.SendMessageRequest()
            for send in sends:
                merged.messages.extend(send.request.messages)
        timeouts = [send.timeout_s for send in sends if send.timeout_s is not None]
        try:
            response = await self._forward(key, merged, sends[0].metadata, min(timeouts, default=None))
        except Exception as exc:  # each client call fails as the broker call did
            for send in sends:
                if not send.answer.done():
                    send.answer.set_exception(exc)
            return
        if len(sends) == 1:
            if not sends[0].answer.done():
                sends[0].answer.set_result(response)
            return
        counts = [len(send.request.messages) for send in sends]
        refused = len(response.entries) != sum(counts)  # as a whole: no entries, only a status
        for send, part in zip(sends, split(counts)):
            if send.answer.done():  # the client gave up
                continue
            if refused:
                send.answer.set_result(v5s.SendMessageResponse(status=response.status))
                continue
            send.answer.set_result(send_answer(response.entries[part]))
