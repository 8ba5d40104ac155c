"""quorumq's client against a scripted in-process MessagingService: what goes on the wire and how
answers are read (throttling, partial failures, route refresh, pull streams).

The real broker is tested in tests/integration; here the server's answers are chosen by each test.
"""

import asyncio

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol import service_pb2_grpc as rpc_grpc

from harness import free_base_port
from quorumq.client import (FOUND, NO_NEW_MSG, OFFSET_ILLEGAL, AdminClient, Blocking, ClientError, Message,
                            Producer, PullConsumer)
from quorumq.cluster import cluster_pb2_grpc as pb_grpc

OK = v5.Status(code=v5.Code.OK, message="OK")


def queue(topic: str, queue_id: int, port: int) -> v5.MessageQueue:
    endpoints = v5.Endpoints(scheme=v5.AddressScheme.IPv4, addresses=[v5.Address(host="127.0.0.1", port=port)])
    return v5.MessageQueue(topic=v5.Resource(name=topic), id=queue_id, permission=v5.Permission.READ_WRITE,
                           broker=v5.Broker(name="broker-a", id=0, endpoints=endpoints),
                           accept_message_types=[v5.MessageType.NORMAL])


class ScriptedBroker(rpc_grpc.MessagingServiceServicer):
    """Answers QueryRoute with `queues` queues on `route_ports` (one per call, the last repeating)."""

    def __init__(self) -> None:
        self.port = 0
        self.queues = 4
        self.route_ports: list[int] = []
        self.route_calls = 0
        self.sends: list[tuple[rpc.SendMessageRequest, dict]] = []
        self.send_answers: list[rpc.SendMessageResponse] = []  # scripted answers, then all OK
        self.offset_answer = rpc.GetOffsetResponse(status=OK)

    async def QueryRoute(self, request, context):
        ports = self.route_ports or [self.port]
        port = ports[min(self.route_calls, len(ports) - 1)]
        self.route_calls += 1
        return rpc.QueryRouteResponse(status=OK, message_queues=[
            queue(request.topic.name, i, port) for i in range(self.queues)])

    async def SendMessage(self, request, context):
        self.sends.append((request, dict(context.invocation_metadata())))
        if self.send_answers:
            return self.send_answers.pop(0)
        return rpc.SendMessageResponse(status=OK, entries=[
            rpc.SendResultEntry(status=v5.Status(code=v5.Code.OK, message="SEND_OK"),
                                message_id=m.system_properties.message_id, offset=index)
            for index, m in enumerate(request.messages)])

    async def GetOffset(self, request, context):
        return self.offset_answer


@pytest.fixture
async def broker():
    scripted = ScriptedBroker()
    server = grpc.aio.server()
    rpc_grpc.add_MessagingServiceServicer_to_server(scripted, server)
    scripted.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield scripted
    await server.stop(None)


def access_point(broker: ScriptedBroker) -> str:
    return f"127.0.0.1:{broker.port}"


async def test_send_batch_to_an_explicit_queue_puts_everything_on_the_wire(broker):
    messages = [Message(f"m{i}".encode(), tag="red", keys=("k1", "k2"), properties={"p": str(i)})
                for i in range(5)]
    async with Producer(access_point(broker)) as producer:
        results = await producer.send_batch("orders", messages, queue_id=2)
    [(request, metadata)] = broker.sends
    assert metadata["x-quorumq-explicit-queue"] == "1"
    assert [m.body for m in request.messages] == [m.body for m in messages]
    first = request.messages[0]
    assert first.topic.name == "orders" and first.user_properties == {"p": "0"}
    properties = first.system_properties
    assert (properties.queue_id, properties.tag, list(properties.keys)) == (2, "red", ["k1", "k2"])
    assert properties.message_type == v5.MessageType.NORMAL
    assert properties.body_encoding == v5.Encoding.IDENTITY
    assert properties.born_timestamp.seconds > 0 and properties.born_host
    assert [r.status for r in results] == ["SEND_OK"] * 5
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert [r.message_id for r in results] == [m.system_properties.message_id for m in request.messages]
    assert {(r.queue_id, r.broker_name) for r in results} == {(2, "broker-a")}


async def test_requests_go_round_robin_over_the_writable_queues(broker):
    async with Producer(access_point(broker), batch_messages=10) as producer:
        results = await producer.send_batch("orders", [Message(b"x")] * 40)
    queue_ids = sorted(request.messages[0].system_properties.queue_id for request, _ in broker.sends)
    assert queue_ids == [0, 1, 2, 3]
    assert all(len(request.messages) == 10 for request, _ in broker.sends)
    assert len(results) == 40 and all(r.ok for r in results)


async def test_throttled_messages_are_retried_with_the_same_ids(broker):
    throttled = rpc.SendMessageResponse(status=v5.Status(code=v5.Code.TOO_MANY_REQUESTS,
                                                         message="TOO_MANY_REQUESTS: busy"))
    broker.send_answers = [throttled, throttled]
    async with Producer(access_point(broker)) as producer:
        results = await producer.send_batch("orders", [Message(b"a"), Message(b"b")], queue_id=0)
    assert len(broker.sends) == 3
    ids = [[m.system_properties.message_id for m in request.messages] for request, _ in broker.sends]
    assert ids[0] == ids[1] == ids[2]
    assert [r.status for r in results] == ["SEND_OK", "SEND_OK"]


async def test_only_throttled_entries_are_sent_again(broker):
    busy = v5.Status(code=v5.Code.TOO_MANY_REQUESTS, message="TOO_MANY_REQUESTS: busy")
    broker.send_answers = [rpc.SendMessageResponse(status=busy, entries=[
        rpc.SendResultEntry(status=v5.Status(code=v5.Code.OK, message="SEND_OK"), offset=7),
        rpc.SendResultEntry(status=busy)])]
    async with Producer(access_point(broker)) as producer:
        results = await producer.send_batch("orders", [Message(b"a"), Message(b"b")], queue_id=0)
    assert [m.body for m in broker.sends[1][0].messages] == [b"b"]
    assert [(r.status, r.queue_offset) for r in results] == [("SEND_OK", 7), ("SEND_OK", 0)]


async def test_failed_entries_and_refused_requests_carry_their_names(broker):
    broker.send_answers = [
        rpc.SendMessageResponse(
            status=v5.Status(code=v5.Code.SLAVE_PERSISTENCE_TIMEOUT, message="FLUSH_SLAVE_TIMEOUT: no ack"),
            entries=[rpc.SendResultEntry(status=v5.Status(code=v5.Code.OK, message="SEND_OK"), offset=3),
                     rpc.SendResultEntry(status=v5.Status(code=v5.Code.SLAVE_PERSISTENCE_TIMEOUT,
                                                          message="FLUSH_SLAVE_TIMEOUT: no ack"), offset=4)]),
        rpc.SendMessageResponse(status=v5.Status(code=v5.Code.ILLEGAL_TOPIC, message="ILLEGAL_TOPIC: bad name"))]
    async with Producer(access_point(broker)) as producer:
        first = await producer.send_batch("orders", [Message(b"a"), Message(b"b")], queue_id=0)
        second = await producer.send_batch("orders", [Message(b"c")], queue_id=0)
    assert [(r.status, r.queue_offset, r.detail) for r in first] == [
        ("SEND_OK", 3, ""), ("FLUSH_SLAVE_TIMEOUT", 4, "no ack")]
    assert [(r.status, r.queue_offset, r.ok) for r in second] == [("ILLEGAL_TOPIC", -1, False)]


async def test_a_broker_that_does_not_answer_makes_the_producer_ask_the_route_again(broker):
    broker.route_ports = [free_base_port(1), broker.port]  # first a dead address, then the real one
    async with Producer(access_point(broker), timeout_s=2) as producer:
        results = await producer.send_batch("orders", [Message(b"a")], queue_id=1)
    assert broker.route_calls == 2
    assert [r.status for r in results] == ["SEND_OK"]


async def test_an_unknown_queue_is_a_client_error(broker):
    async with Producer(access_point(broker)) as producer:
        with pytest.raises(ClientError, match="no queue 9"):
            await producer.send_batch("orders", [Message(b"a")], queue_id=9)


class ScriptedNameServer(pb_grpc.NameServerServicer):
    async def GetRoute(self, request, context):
        await context.abort(grpc.StatusCode.NOT_FOUND, f"TOPIC_NOT_FOUND: no route for topic {request.topic}")


async def test_admin_errors_carry_the_catalogue_name():
    server = grpc.aio.server()
    pb_grpc.add_NameServerServicer_to_server(ScriptedNameServer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with AdminClient(f"127.0.0.1:{port}") as admin:
            with pytest.raises(ClientError) as raised:
                await admin.route("orders")
    finally:
        await server.stop(None)
    assert (raised.value.name, raised.value.detail) == ("TOPIC_NOT_FOUND", "no route for topic orders")
    assert raised.value.grpc_status == grpc.StatusCode.NOT_FOUND and not raised.value.unreachable
