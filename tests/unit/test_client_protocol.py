"""quorumq's client against a scripted in-process broker: what goes on the wire and how answers are
read (SendBatch records, throttling, refusals, route refresh).

The real broker is tested in tests/integration; here the server's answers are chosen by each test.
"""

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol import service_pb2_grpc as rpc_grpc

from harness import free_base_port
from quorumq.client import AdminClient, ClientError, Message, Producer
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core import codec
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort
from quorumq.store import StoredMessage

OK = v5.Status(code=v5.Code.OK, message="OK")


def queue(topic: str, queue_id: int, port: int) -> v5.MessageQueue:
    endpoints = v5.Endpoints(scheme=v5.AddressScheme.IPv4, addresses=[v5.Address(host="127.0.0.1", port=port)])
    return v5.MessageQueue(topic=v5.Resource(name=topic), id=queue_id, permission=v5.Permission.READ_WRITE,
                           broker=v5.Broker(name="broker-a", id=0, endpoints=endpoints),
                           accept_message_types=[v5.MessageType.NORMAL])


class ScriptedBroker(rpc_grpc.MessagingServiceServicer, pb_grpc.MessageWriterServicer):
    """Answers QueryRoute with `queues` queues on `route_ports` (one per call, the last repeating),
    and SendBatch with `send_answers`, then SEND_OK from queue offset 0."""

    def __init__(self) -> None:
        self.port = 0
        self.queues = 4
        self.route_ports: list[int] = []
        self.route_calls = 0
        self.sends: list[pb.SendBatchRequest] = []
        self.send_answers: list[pb.SendBatchResponse] = []

    async def QueryRoute(self, request, context):
        ports = self.route_ports or [self.port]
        port = ports[min(self.route_calls, len(ports) - 1)]
        self.route_calls += 1
        return rpc.QueryRouteResponse(status=OK, message_queues=[
            queue(request.topic.name, i, port) for i in range(self.queues)])

    async def SendBatch(self, request, context):
        self.sends.append(request)
        if self.send_answers:
            return self.send_answers.pop(0)
        return pb.SendBatchResponse(status="SEND_OK", first_queue_offset=0, count=request.count)


def records_of(request: pb.SendBatchRequest) -> list[StoredMessage]:
    """The records of a request, each checked as the broker checks it."""
    view, position, found = memoryview(request.records), 0, []
    while position < len(view):
        frame, size = codec.check_detached(view, position)
        assert frame is codec.Frame.MESSAGE
        found.append(codec.decode_message(view, position, ""))
        position += size
    assert len(found) == request.count
    return found


@pytest.fixture
async def broker():
    scripted = ScriptedBroker()
    server = grpc.aio.server()
    rpc_grpc.add_MessagingServiceServicer_to_server(scripted, server)
    pb_grpc.add_MessageWriterServicer_to_server(scripted, server)
    scripted.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield scripted
    await server.stop(None)


def access_point(broker: ScriptedBroker) -> str:
    return f"127.0.0.1:{broker.port}"


async def test_send_batch_to_an_explicit_queue_puts_records_on_the_wire(broker):
    messages = [Message(f"m{i}".encode(), tag="red", keys=("k1", "k2"), properties={"p": str(i)})
                for i in range(5)]
    async with Producer(access_point(broker)) as producer:
        results = await producer.send_batch("orders", messages, queue_id=2)
    [request] = broker.sends
    assert (request.topic, request.queue_id, request.count) == ("orders", 2, 5)
    records = records_of(request)
    assert [m.body for m in records] == [m.body for m in messages]
    first = records[0]
    assert (first.topic, first.queue_id) == ("orders", 2) and first.born_timestamp_ms > 0 and first.born_host
    assert (first.queue_offset, first.commit_log_offset, first.store_timestamp_ms) == (0, 0, 0), "for the broker"
    assert first.properties == {"UNIQ_KEY": results[0].message_id, "p": "0", "TAGS": "red", "KEYS": "k1 k2"}
    assert [r.status for r in results] == ["SEND_OK"] * 5
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert [r.message_id for r in results] == [m.properties["UNIQ_KEY"] for m in records]
    assert {(r.queue_id, r.broker_name) for r in results} == {(2, "broker-a")}


async def test_requests_go_round_robin_over_the_writable_queues(broker):
    async with Producer(access_point(broker), batch_messages=10) as producer:
        results = await producer.send_batch("orders", [Message(b"x")] * 40)
    assert sorted(request.queue_id for request in broker.sends) == [0, 1, 2, 3]
    assert all({m.queue_id for m in records_of(request)} == {request.queue_id} for request in broker.sends)
    assert all(request.count == 10 for request in broker.sends)
    assert len(results) == 40 and all(r.ok for r in results)


async def test_throttled_requests_are_retried_with_the_same_ids(broker):
    throttled = pb.SendBatchResponse(status="TOO_MANY_REQUESTS", detail="busy")
    broker.send_answers = [throttled, throttled]
    async with Producer(access_point(broker)) as producer:
        results = await producer.send_batch("orders", [Message(b"a"), Message(b"b")], queue_id=0)
    assert len(broker.sends) == 3
    ids = [[m.properties["UNIQ_KEY"] for m in records_of(request)] for request in broker.sends]
    assert ids[0] == ids[1] == ids[2]
    assert [r.status for r in results] == ["SEND_OK", "SEND_OK"]


async def test_throttling_past_the_retry_time_comes_back_as_results(broker):
    broker.send_answers = [pb.SendBatchResponse(status="TOO_MANY_REQUESTS", detail="busy")] * 100
    async with Producer(access_point(broker), retry_s=0.05) as producer:
        results = await producer.send_batch("orders", [Message(b"a"), Message(b"b")], queue_id=0)
    assert [(r.status, r.queue_offset, r.detail, r.ok) for r in results] == [
        ("TOO_MANY_REQUESTS", -1, "busy", False)] * 2


async def test_a_message_breaking_a_rule_is_refused_here_and_the_rest_are_sent(broker):
    messages = [Message(b"a"), Message(b""), Message(b"c", tag="x|y"), Message(b"d", properties={"UNIQ_KEY": "mine"}),
                Message(b"e")]
    broker.send_answers = [pb.SendBatchResponse(status="SEND_OK", first_queue_offset=7, count=2)]
    async with Producer(access_point(broker)) as producer:
        results = await producer.send_batch("orders", messages, queue_id=1)
    [request] = broker.sends
    assert [m.body for m in records_of(request)] == [b"a", b"e"]
    assert [(r.status, r.queue_offset) for r in results] == [
        ("SEND_OK", 7), ("MESSAGE_BODY_EMPTY", -1), ("ILLEGAL_MESSAGE_TAG", -1), ("ILLEGAL_MESSAGE_PROPERTY_KEY", -1),
        ("SEND_OK", 8)]
    assert len({r.message_id for r in results}) == 5 and all(r.queue_id == 1 for r in results)


async def test_stored_statuses_and_refusals_carry_their_names(broker):
    broker.send_answers = [
        pb.SendBatchResponse(status="FLUSH_SLAVE_TIMEOUT", first_queue_offset=3, count=2),
        pb.SendBatchResponse(status="ILLEGAL_TOPIC", detail="bad name")]
    async with Producer(access_point(broker)) as producer:
        first = await producer.send_batch("orders", [Message(b"a"), Message(b"b")], queue_id=0)
        second = await producer.send_batch("orders", [Message(b"c")], queue_id=0)
    assert [(r.status, r.queue_offset, r.ok) for r in first] == [
        ("FLUSH_SLAVE_TIMEOUT", 3, False), ("FLUSH_SLAVE_TIMEOUT", 4, False)]
    assert [(r.status, r.queue_offset, r.detail, r.ok) for r in second] == [("ILLEGAL_TOPIC", -1, "bad name", False)]


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
        await abort(context, QuorumqError(Error.TOPIC_NOT_FOUND, f"no route for topic {request.topic}"))


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
