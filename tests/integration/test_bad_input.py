"""Bad input on every port: a clear error with a stable code, and the server keeps serving."""

import os
import random
import socket
import uuid

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import MESSAGING_SERVICE, SMALL_MESSAGE_SIZE, log_end, log_since, process_of
from quorumq import limits
from quorumq.client import ClientError
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.errors import Error


@pytest.fixture(scope="module")
def stub(small_message_cluster):
    broker = process_of(small_message_cluster, "broker")
    channel = grpc.insecure_channel(broker["address"], options=[("grpc.max_send_message_length", -1)])
    yield v5_grpc.MessagingServiceStub(channel)
    channel.close()


def message(topic="BadInput", body=b"x", message_type=v5.MessageType.NORMAL, **system):
    return v5.Message(topic=v5.Resource(name=topic), body=body, user_properties=system.pop("user", {}),
                      system_properties=v5.SystemProperties(message_id=uuid.uuid4().hex, message_type=message_type,
                                                            body_encoding=v5.Encoding.IDENTITY, **system))


def send(stub, *messages):
    return stub.SendMessage(v5s.SendMessageRequest(messages=list(messages)), timeout=10)


@pytest.mark.parametrize("bad, code", [
    (message(topic="has space"), v5.Code.ILLEGAL_TOPIC),
    (message(topic="x" * (limits.NAME_LENGTH_MAX + 1)), v5.Code.ILLEGAL_TOPIC),
    (message(body=b""), v5.Code.MESSAGE_BODY_EMPTY),
    (message(body=b"x" * (SMALL_MESSAGE_SIZE + 1)), v5.Code.MESSAGE_BODY_TOO_LARGE),
    (message(user={"UNIQ_KEY": "mine"}), v5.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (message(tag="a|b"), v5.Code.ILLEGAL_MESSAGE_TAG),
    (message(message_type=v5.MessageType.FIFO, message_group="g"), v5.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=v5.MessageType.FIFO, message_group="a\nb"), v5.Code.ILLEGAL_MESSAGE_GROUP),
    (message(message_type=v5.MessageType.FIFO, message_group="g" * 65), v5.Code.ILLEGAL_MESSAGE_GROUP),
    (message(message_type=v5.MessageType.TRANSACTION), v5.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=v5.MessageType.DELAY, delivery_timestamp=Timestamp(seconds=1)),
     v5.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # a NORMAL topic: a delivery time on it is refused
    (message(message_type=v5.MessageType.PRIORITY), v5.Code.UNSUPPORTED),
])
def test_bad_message_gets_its_code_and_is_not_stored(stub, bad, code):
    response = send(stub, bad)
    assert response.status.code == code, response.status.message
    assert response.entries[0].status.code == code
    good = send(stub, message(body=b"still serving"))
    assert good.status.code == v5.Code.OK


def test_good_and_bad_messages_in_one_batch(stub):
    response = send(stub, message(body=b"one"), message(body=b""), message(body=b"three"))
    assert [entry.status.code for entry in response.entries] == [
        v5.Code.OK, v5.Code.MESSAGE_BODY_EMPTY, v5.Code.OK]
    assert response.status.code == v5.Code.MESSAGE_BODY_EMPTY


def test_batch_over_the_limit_is_refused_whole(stub):
    response = send(stub, *[message(body=b"x")] * (limits.BATCH_MESSAGES_MAX + 1))
    assert response.status.code == v5.Code.PAYLOAD_TOO_LARGE
    assert "BATCH_TOO_LARGE" in response.status.message


def test_unknown_group_names_and_filters(stub):
    queue = v5.MessageQueue(topic=v5.Resource(name="BadInput"), id=0)
    pulled = list(stub.PullMessage(v5s.PullMessageRequest(
        group=v5.Resource(name="bad group"), message_queue=queue, offset=0, batch_size=1), timeout=10))
    assert pulled[0].status.code == v5.Code.ILLEGAL_CONSUMER_GROUP
    for group in ("bad group", "G" * (limits.GROUP_NAME_LENGTH_MAX + 1)):  # a group's DLQ topic must be a name
        received = list(stub.ReceiveMessage(v5s.ReceiveMessageRequest(
            group=v5.Resource(name=group), message_queue=queue, batch_size=1), timeout=10))
        assert received[0].status.code == v5.Code.ILLEGAL_CONSUMER_GROUP, group
    received = list(stub.ReceiveMessage(v5s.ReceiveMessageRequest(
        group=v5.Resource(name="G"), message_queue=queue, batch_size=1,
        filter_expression=v5.FilterExpression(type=v5.FilterType.SQL, expression="a > 1")), timeout=10))
    assert received[0].status.code == v5.Code.ILLEGAL_FILTER_EXPRESSION
    ack = stub.AckMessage(v5s.AckMessageRequest(group=v5.Resource(name="G"), topic=v5.Resource(name="BadInput"),
                                                entries=[v5s.AckMessageEntry(message_id="x", receipt_handle="junk")]),
                          timeout=10)
    assert ack.status.code == v5.Code.INVALID_RECEIPT_HANDLE


def test_pull_beyond_the_end_is_an_illegal_offset(stub):
    send(stub, message(topic="PullEnd", body=b"x"))
    queue = v5.MessageQueue(topic=v5.Resource(name="PullEnd"), id=0)
    first = list(stub.PullMessage(v5s.PullMessageRequest(group=v5.Resource(name="G"), message_queue=queue,
                                                         offset=10**9, batch_size=1), timeout=10))
    assert first[0].status.code == v5.Code.ILLEGAL_OFFSET


def _garbage_everywhere(cluster, seed: int) -> list[socket.socket]:
    """Random bytes and a half-sent HTTP/2 preface on every port, each read by the server (it closed the
    connection), and idle half-open connections that the server answered with its settings."""
    rng = random.Random(seed)
    idle = []
    for process in cluster["processes"]:
        host, port = process["address"].rsplit(":", 1)
        for payload in (rng.randbytes(4096), b"PRI * HTTP/2.0\r\n", os.urandom(64)):
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                try:
                    sock.sendall(payload)
                    sock.shutdown(socket.SHUT_WR)
                    while sock.recv(4096):  # until the server, having read it all, closes
                        pass
                except ConnectionError:  # it closed before reading everything: it read enough
                    pass
        half_open = socket.create_connection((host, int(port)), timeout=5)
        half_open.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert half_open.recv(9), "the server did not start HTTP/2 on a whole preface"  # its SETTINGS
        idle.append(half_open)
    return idle


def test_garbage_and_half_open_connections_do_not_stop_service(small_message_cluster, stub):
    before = send(stub, message(topic="Garbage", body=b"before"))
    assert before.status.code == v5.Code.OK
    idle = _garbage_everywhere(small_message_cluster, seed=7)
    try:
        after = send(stub, message(topic="Garbage", body=b"after"))
        assert after.status.code == v5.Code.OK
        route = v5_grpc.MessagingServiceStub(grpc.insecure_channel(small_message_cluster["access_point"])).QueryRoute(
            v5s.QueryRouteRequest(topic=v5.Resource(name="Garbage")), timeout=10)
        assert route.status.code == v5.Code.OK
        bodies = set()
        for queue_id in range(8):
            pulled = stub.PullMessage(v5s.PullMessageRequest(
                group=v5.Resource(name="G"), message_queue=v5.MessageQueue(topic=v5.Resource(name="Garbage"),
                                                                           id=queue_id), offset=0, batch_size=10),
                timeout=10)
            bodies |= {r.message.body for r in pulled if r.HasField("message")}
        assert bodies == {b"before", b"after"}, "a stored message was lost"
    finally:
        for sock in idle:
            sock.close()


UNPARSABLE = b"\x0a\x05ab"  # field 1, said to be 5 bytes long, of which 2 came
RAW_CALLS = [  # (process kind, method, its shape): the v5 service and the cluster protocol's, every shape
    ("broker", MESSAGING_SERVICE + "QueryRoute", "unary_unary"),
    ("broker", MESSAGING_SERVICE + "ReceiveMessage", "unary_stream"),
    ("broker", MESSAGING_SERVICE + "Telemetry", "stream_stream"),
    ("broker", "/quorumq.cluster.BrokerAdmin/UpdateTopic", "unary_unary"),
    ("broker", "/quorumq.cluster.MessageReader/PullBatch", "unary_stream"),
    ("namesrv", MESSAGING_SERVICE + "QueryRoute", "unary_unary"),
    ("namesrv", "/quorumq.cluster.NameServer/RegisterBroker", "unary_unary"),
]


def test_a_request_that_does_not_parse_is_invalid_argument_in_one_log_line(small_message_cluster, stub):
    processes = {kind: process_of(small_message_cluster, kind) for kind in ("broker", "namesrv")}
    logged_before = {kind: log_end(process) for kind, process in processes.items()}
    for kind, method, shape in RAW_CALLS:
        with grpc.insecure_channel(processes[kind]["address"]) as channel:
            call = getattr(channel, shape)(method, request_serializer=lambda raw: raw)
            request = iter([UNPARSABLE]) if shape.startswith("stream") else UNPARSABLE
            with pytest.raises(grpc.RpcError) as failed:
                answer = call(request, timeout=10)
                if shape.endswith("stream"):
                    list(answer)
            assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, failed.value)
            error = ClientError.from_rpc(failed.value)  # the entry by its code, on every port
            assert error.error is Error.BAD_REQUEST and "does not parse" in error.detail, (method, error)
    for kind, process in processes.items():
        logged = log_since(process, logged_before[kind])
        assert "Traceback" not in logged, logged
        assert logged.count("does not parse") == sum(1 for call in RAW_CALLS if call[0] == kind), logged
    assert send(stub, message(body=b"still serving")).status.code == v5.Code.OK


def test_query_offset_at_a_timestamp_out_of_range_is_a_bad_request(stub):
    assert send(stub, message(topic="OffsetByTime")).status.code == v5.Code.OK
    answer = stub.QueryOffset(v5s.QueryOffsetRequest(
        message_queue=v5.MessageQueue(topic=v5.Resource(name="OffsetByTime"), id=0),
        query_offset_policy=v5.QueryOffsetPolicy.TIMESTAMP, timestamp={"seconds": -2**62}), timeout=10)
    assert answer.status.code == v5.Code.BAD_REQUEST, answer.status.message
    assert "Timestamp is not valid" in answer.status.message


def test_an_error_quotes_a_long_name_cut_short(small_message_cluster, stub):
    name = "x y" * 4000  # 12 KB, illegal: quoted whole, the cluster protocol's status outgrows gRPC's metadata
    answer = stub.QueryRoute(v5s.QueryRouteRequest(topic=v5.Resource(name=name)), timeout=10)
    assert answer.status.code == v5.Code.ILLEGAL_TOPIC
    assert len(answer.status.message) < 2 * limits.QUOTED_TEXT_MAX and "12000 characters" in answer.status.message
    with grpc.insecure_channel(process_of(small_message_cluster, "broker")["address"]) as channel:
        with pytest.raises(grpc.RpcError) as failed:
            pb_grpc.BrokerAdminStub(channel).UpdateTopic(pb.TopicConfig(name=name, read_queue_nums=1,
                                                                        write_queue_nums=1, perm=6), timeout=10)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failed.value
    assert "12000 characters" in failed.value.details()


@pytest.mark.parametrize("field", ["cluster", "broker_name"])
def test_the_name_server_refuses_control_characters_in_names(small_message_cluster, field):
    namesrv = process_of(small_message_cluster, "namesrv")
    logged_before = log_end(namesrv)
    names = {"cluster": "DefaultCluster", "broker_name": "evil", field: "evil\n\x1b[31mforged line"}
    with grpc.insecure_channel(namesrv["address"]) as channel:
        names_server = pb_grpc.NameServerStub(channel)
        for call in (names_server.RegisterBroker, names_server.UnregisterBroker):
            with pytest.raises(grpc.RpcError) as failed:
                call(pb.BrokerRegistration(broker_id=0, address="127.0.0.1:1", role="ASYNC_MASTER", **names),
                     timeout=10)
            assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failed.value
        assert "\x1b" not in log_since(namesrv, logged_before)
        assert "evil" not in pb_grpc.NameServerStub(channel).GetClusterInfo(pb.Empty(), timeout=10).__str__()


@pytest.mark.parametrize("field, value, error", [
    ("address", "127.0.0.1:1\n\x1b[31mforged line", Error.BAD_REQUEST),
    ("address", "no-port", Error.BAD_REQUEST),
    ("address", "", Error.BAD_REQUEST),
    ("ha_address", "127.0.0.1:99999", Error.BAD_REQUEST),
    ("topic", "evil\n\x1b[31mforged line", Error.ILLEGAL_TOPIC),
])
def test_the_name_server_refuses_bad_addresses_and_topic_names(small_message_cluster, field, value, error):
    namesrv = process_of(small_message_cluster, "namesrv")
    logged_before = log_end(namesrv)
    registration = pb.BrokerRegistration(cluster="DefaultCluster", broker_name="evil", broker_id=0,
                                         address="127.0.0.1:1", ha_address="127.0.0.1:2", role="ASYNC_MASTER")
    if field == "topic":
        registration.topics.add(name=value, read_queue_nums=1, write_queue_nums=1, perm=6)
    else:
        setattr(registration, field, value)
    with grpc.insecure_channel(namesrv["address"]) as channel:
        names_server = pb_grpc.NameServerStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            names_server.RegisterBroker(registration, timeout=10)
        assert ClientError.from_rpc(failed.value).error is error, failed.value
        logged = log_since(namesrv, logged_before)
        assert "registration from" in logged and "\x1b" not in logged, logged
        assert "evil" not in str(names_server.GetClusterInfo(pb.Empty(), timeout=10))
