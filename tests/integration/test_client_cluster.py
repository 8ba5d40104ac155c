"""quorumq's own client against a real cluster from `quorumq up`: batch sends to chosen queues, pulls
back in order, offset queries, committed offsets, long polling, several brokers, the blocking facade."""

import asyncio
import time
import uuid

import grpc
import pytest

from quorumq.client import (
    FOUND,
    NO_NEW_MSG,
    OFFSET_ILLEGAL,
    AdminClient,
    Blocking,
    ClientError,
    Message,
    Producer,
    PullConsumer,
)
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.errors import Error
from quorumq.grpc_errors import sent_error


def new_topic() -> str:
    return f"T{uuid.uuid4().hex[:10]}"


async def pull_all(consumer: PullConsumer, topic: str, queue_id: int, count: int, **where) -> list:
    messages, offset = [], 0
    while len(messages) < count:
        result = await consumer.pull(topic, queue_id, offset, 128, **where)
        assert result.status == FOUND, result
        messages += result.messages
        offset = result.next_offset
    return messages


async def test_batch_sent_to_one_queue_is_pulled_back_in_order(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    messages = [Message(f"m{i}".encode(), tag="blue", keys=(f"k{i}", "all"), properties={"index": str(i)})
                for i in range(300)]
    async with Producer(access_point, batch_messages=64) as producer:
        results = await producer.send_batch(topic, messages, queue_id=3)
    assert [r.status for r in results] == ["SEND_OK"] * 300
    assert [r.queue_offset for r in results] == list(range(300))
    assert {(r.queue_id, r.broker_name) for r in results} == {(3, "broker-a")}
    assert len({r.message_id for r in results}) == 300

    async with PullConsumer(access_point, "G") as consumer:
        pulled = await pull_all(consumer, topic, 3, 300)
        assert [m.body for m in pulled] == [m.body for m in messages]
        assert [m.queue_offset for m in pulled] == list(range(300))
        assert [m.message_id for m in pulled] == [r.message_id for r in results]
        assert all(m.tag == "blue" and m.queue_id == 3 and m.topic == topic for m in pulled)
        assert [(m.keys, m.properties) for m in pulled[:2]] == [
            (("k0", "all"), {"index": "0"}), (("k1", "all"), {"index": "1"})]
        assert all(m.store_timestamp_ms >= m.born_timestamp_ms > 0 and m.store_host for m in pulled)

        at_end = await consumer.pull(topic, 3, 300, 10)
        assert (at_end.status, at_end.messages, at_end.next_offset) == (NO_NEW_MSG, [], 300)
        assert (await consumer.pull(topic, 3, 10_000, 10)).status == OFFSET_ILLEGAL
        assert (await consumer.pull(topic, 0, 0, 10)).status == NO_NEW_MSG, "other queues stay empty"


async def test_requests_spread_round_robin_over_the_queues(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    async with Producer(access_point, batch_messages=10) as producer:
        results = await producer.send_batch(topic, [Message(b"x")] * 80)
    assert all(r.ok for r in results)
    async with PullConsumer(access_point, "G") as consumer:
        queues = await consumer.queues(topic)
        ends = [await consumer.query_offset(topic, q.queue_id, "END") for q in queues]
    assert len(queues) == 8 and ends == [10] * 8


async def test_a_batch_larger_than_one_request_is_split_and_stays_in_order(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    async with Producer(access_point) as producer:
        results = await producer.send_batch(topic, [Message(f"{i}".encode()) for i in range(2500)], queue_id=0)
    assert all(r.ok for r in results)
    assert [r.queue_offset for r in results] == list(range(2500))


async def test_query_offset_at_beginning_end_and_by_time(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    async with Producer(access_point) as producer, PullConsumer(access_point, "G") as consumer:
        await producer.send_batch(topic, [Message(b"early")] * 5, queue_id=1)
        # Time must pass (store times are in ms) for a timestamp strictly between the two batches.
        await asyncio.sleep(0.05)
        between_ms = time.time_ns() // 1_000_000
        await asyncio.sleep(0.05)
        await producer.send_batch(topic, [Message(b"late")] * 5, queue_id=1)
        assert await consumer.query_offset(topic, 1, "BEGINNING") == 0
        assert await consumer.query_offset(topic, 1, "END") == 10
        assert await consumer.query_offset(topic, 1, between_ms) == 5
        assert await consumer.query_offset(topic, 1, 0) == 0


async def test_committed_offsets_are_kept_per_group(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    async with Producer(access_point) as producer:
        await producer.send_batch(topic, [Message(b"x")] * 10, queue_id=2)
    async with PullConsumer(access_point, "OffsetGroup") as consumer:
        assert await consumer.get_offset(topic, 2) is None
        await consumer.commit_offset(topic, 2, 7)
        assert await consumer.get_offset(topic, 2) == 7
    async with PullConsumer(access_point, "OffsetGroup") as again, PullConsumer(access_point, "Other") as other:
        assert await again.get_offset(topic, 2) == 7
        assert await other.get_offset(topic, 2) is None


async def test_a_long_poll_returns_when_a_message_arrives(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    async with Producer(access_point) as producer, PullConsumer(access_point, "G") as consumer:
        await producer.send_batch(topic, [Message(b"first")], queue_id=0)
        waiting = asyncio.create_task(consumer.pull(topic, 0, 1, 10, long_poll_s=20))
        await asyncio.sleep(0.5)  # a while with nothing to return: that the pull is held is what is tested
        assert not waiting.done(), "nothing new yet: the pull is held"
        await producer.send_batch(topic, [Message(b"second")], queue_id=0)
        result = await asyncio.wait_for(waiting, timeout=15)
    assert result.status == FOUND and [m.body for m in result.messages] == [b"second"]


async def test_two_brokers_share_a_topic(start_cluster):
    cluster = start_cluster(brokers=2)
    access_point, topic = cluster["access_point"], new_topic()
    async with Producer(access_point, batch_messages=5) as producer, PullConsumer(access_point, "G") as consumer:
        spread = await producer.send_batch(topic, [Message(b"x")] * 80)
        assert {r.broker_name for r in spread} == {"broker-a", "broker-b"}
        [on_b] = await producer.send_batch(topic, [Message(b"only-b")], queue_id=0, broker_name="broker-b")
        assert on_b.broker_name == "broker-b"
        pulled = await consumer.pull(topic, 0, on_b.queue_offset, 10, broker_name="broker-b")
        assert [m.body for m in pulled.messages] == [b"only-b"]
        assert {q.broker_name for q in await consumer.queues(topic)} == {"broker-a", "broker-b"}


def test_the_blocking_facade(shared_cluster):
    access_point, topic = shared_cluster["access_point"], new_topic()
    with Blocking(Producer, access_point) as producer:
        results = producer.send_batch(topic, [Message(b"a"), Message(b"b")], queue_id=0)
    assert [r.queue_offset for r in results] == [0, 1]
    with Blocking(PullConsumer, access_point, "G") as consumer:
        assert [m.body for m in consumer.pull(topic, 0, 0, 10).messages] == [b"a", b"b"]


async def test_admin_client_sees_the_cluster_and_changes_topics(shared_cluster):
    [broker] = [p for p in shared_cluster["processes"] if p["kind"] == "broker"]
    topic = new_topic()
    async with AdminClient(shared_cluster["access_point"]) as admin:
        [info] = await admin.brokers()
        assert (info.broker_name, info.broker_id, info.address) == ("broker-a", 0, broker["address"])
        await admin.update_topic(broker["address"], topic, read_queue_nums=2, write_queue_nums=2)
        route = await admin.route(topic)
        assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queues] == [("broker-a", 2, 2)]
        assert topic in await admin.topic_list()
        group = await admin.member_group(shared_cluster["cluster"], "broker-a")
        assert dict(group.addresses) == {0: broker["address"]}


async def test_a_cluster_rpc_error_reaches_the_client_as_its_catalogue_entry_by_code(shared_cluster):
    """A broker's refusals carry the entry's code beside the gRPC status; CONFIG_INVALID shares
    BAD_REQUEST's v5 code and gRPC status, only the code tells them apart."""
    [broker] = [p for p in shared_cluster["processes"] if p["kind"] == "broker"]
    topic = new_topic()
    async with grpc.aio.insecure_channel(broker["address"]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await pb_grpc.BrokerAdminStub(channel).DeleteTopic(pb.TopicRequest(topic=topic), timeout=5)
    sent = sent_error(raw.value.trailing_metadata())
    assert sent is not None and sent.code == Error.TOPIC_NOT_FOUND.code and topic in sent.detail
    async with AdminClient(shared_cluster["access_point"]) as admin:
        with pytest.raises(ClientError) as missing:
            await admin.delete_topic(topic)
        with pytest.raises(ClientError) as bad_key:
            await admin.update_broker_config("noSuchKey", "1", address=broker["address"])
    assert (missing.value.error, missing.value.name) == (Error.TOPIC_NOT_FOUND, "TOPIC_NOT_FOUND")
    assert (bad_key.value.error, bad_key.value.name) == (Error.CONFIG_INVALID, "CONFIG_INVALID")
