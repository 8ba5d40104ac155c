"""The sends of concurrent client calls reach the broker in fewer calls, and each client call gets
its own entries back, or the broker's refusal of the whole."""

import asyncio

from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.proxy.sends import SendLines

KEY = ("broker-a", "T", "")


def request(*bodies: bytes) -> v5s.SendMessageRequest:
    return v5s.SendMessageRequest(messages=[
        v5.Message(topic=v5.Resource(name="T"), body=body,
                   system_properties=v5.SystemProperties(message_id=body.decode()))
        for body in bodies])


class Broker:
    """Answers each message with an entry whose message id is the body; refuses "bad" as a whole."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def forward(self, key, merged, metadata, timeout_s):
        self.calls.append(len(merged.messages))
        await asyncio.sleep(0.01)
        if any(message.body == b"bad" for message in merged.messages):
            return v5s.SendMessageResponse(status=v5.Status(code=v5.Code.PAYLOAD_TOO_LARGE))
        return v5s.SendMessageResponse(status=v5.Status(code=v5.Code.OK), entries=[
            v5s.SendResultEntry(status=v5.Status(code=v5.Code.OK), message_id=message.system_properties.message_id)
            for message in merged.messages])


def test_concurrent_sends_share_broker_calls_and_get_their_own_entries():
    broker = Broker()

    async def run():
        lines = SendLines(broker.forward, 0.0)
        return await asyncio.gather(*(lines.send(KEY, request(f"m{i}a".encode(), f"m{i}b".encode()), (), 5.0)
                                      for i in range(10)))

    answers = asyncio.run(run())
    assert [[entry.message_id for entry in answer.entries] for answer in answers] == \
        [[f"m{i}a", f"m{i}b"] for i in range(10)]
    assert all(answer.status.code == v5.Code.OK for answer in answers)
    assert sum(broker.calls) == 20 and len(broker.calls) < 10


def test_a_refusal_of_the_whole_reaches_every_call_it_carried():
    broker = Broker()

    async def run():
        lines = SendLines(broker.forward, 0.0)
        return await asyncio.gather(*(lines.send(KEY, request(body), (), None) for body in (b"a", b"bad", b"c")))

    answers = asyncio.run(run())
    assert broker.calls == [3]
    assert [(answer.status.code, len(answer.entries)) for answer in answers] == [(v5.Code.PAYLOAD_TOO_LARGE, 0)] * 3


def test_a_failed_broker_call_fails_every_call_it_carried():
    async def unreachable(broker_name, merged, metadata, timeout_s):
        raise ConnectionError("down")

    async def run():
        lines = SendLines(unreachable, 0.0)
        return await asyncio.gather(*(lines.send(KEY, request(b"x"), (), None) for _ in range(3)),
                                    return_exceptions=True)

    assert all(isinstance(answer, ConnectionError) for answer in asyncio.run(run()))
