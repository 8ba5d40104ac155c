"""Past its bounded queue of work a broker answers TOO_MANY_REQUESTS (the code the official client
backs off on) and serves again once the queue drains, on both send paths (v5 SendMessage and
quorumq's SendBatch). Runs the broker object on a real store."""

import grpc
import pytest

from quorumq import limits
from quorumq.broker.broker import Broker
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.config import Config, Kind
from quorumq.core import codec
from quorumq.endpoint.writer import MessageWriterService
from quorumq.errors import Error
from quorumq.grpc_errors import sent_error
from quorumq.store import MessageIn


def message(body: bytes) -> MessageIn:
    return MessageIn(topic="Busy", queue_id=-1, body=body, properties={"UNIQ_KEY": body.hex()},
                     born_timestamp_ms=1, born_host="127.0.0.1:1")


@pytest.fixture
async def broker(tmp_path):
    config = Config(Kind.BROKER, {"storePathRootDir": str(tmp_path), "mappedFileSizeCommitLog": str(1 << 24)})
    broker = Broker(config, Clock())
    broker.open()
    broker.flusher.start()
    yield broker
    await broker.close()


async def test_too_many_pending_messages_are_refused_then_served(broker):
    # Messages still waiting for their flush or acks count against the bound.
    broker.sends.pending_messages = limits.PENDING_SEND_MESSAGES_MAX - 1
    [refused, _] = [await broker.put([message(b"a"), message(b"b")]) for _ in range(2)]
    assert all(result.error.error is Error.TOO_MANY_REQUESTS for result in refused)
    assert broker.store.max_offset == 0, "a refused batch stores nothing"
    broker.sends.pending_messages = 0
    [accepted] = await broker.put([message(b"c")])
    assert accepted.error is None and accepted.queue_offset == 0


class Aborted(Exception):
    pass


class CallWithoutDeadline:
    """What SendBatch asks of its gRPC context: the client set no deadline; a refusal aborts."""

    @staticmethod
    def time_remaining() -> None:
        return None

    @staticmethod
    async def abort(status, details, trailing_metadata):
        raise Aborted(status, sent_error(trailing_metadata))


async def test_encoded_batches_share_the_bound_and_the_answer(broker):
    # SendBatch goes through the same admission as SendMessage; its refusal carries the entry's code.
    writer = MessageWriterService(broker)
    data = b"".join(encoded(body) for body in (b"a", b"b"))
    broker.sends.pending_messages = limits.PENDING_SEND_MESSAGES_MAX - 1
    with pytest.raises(Aborted) as refused:
        await writer.SendBatch(pb.SendBatchRequest(topic="Busy", queue_id=0, records=data, count=2),
                               CallWithoutDeadline())
    status, sent = refused.value.args
    assert (status, sent.code) == (grpc.StatusCode.RESOURCE_EXHAUSTED, Error.TOO_MANY_REQUESTS.code)
    assert "retry later" in sent.detail
    assert broker.store.max_offset == 0, "a refused batch stores nothing"
    broker.sends.pending_messages = 0
    accepted = await writer.SendBatch(pb.SendBatchRequest(topic="Busy", queue_id=0, records=data, count=2),
                                     CallWithoutDeadline())
    assert (accepted.status, accepted.first_queue_offset, accepted.count) == ("SEND_OK", 0, 2)
    assert broker.sends.pending_messages == 0 and broker.stats["msgPutTotal"] == 2


def encoded(body: bytes) -> bytes:
    properties = codec.encode_properties({"UNIQ_KEY": body.hex()})
    size = codec.record_size(b"Busy", b"127.0.0.1:1", properties, body)
    record = bytearray(size)
    codec.encode_record(memoryview(record), 0, size, b"Busy", 0, 0, 0, 1, b"127.0.0.1:1", 0, properties, body)
    return bytes(record)
