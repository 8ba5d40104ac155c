"""Every hostile input of issue 19 at once, at a reduced scale, against one broker and its name
server while the official producer sends: auto-created topics past the open-files cache, a flood of
consumer groups, answers nobody reads, idle connections, receives on names never created, a huge
registration, requests that do not parse, a huge AckMessage and SendMessage, a 10 KB name. Each
gets its error, the broker's and the name server's peak RSS stay under the documented bound
(limits.HOSTILE_LOAD_RSS_BYTES_MAX) and every acknowledged message is read back afterwards."""

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import (
    MESSAGING_SERVICE,
    RawConnection,
    check_for,
    configuration,
    log_end,
    log_since,
    official_message,
    peak_rss_bytes,
    process_of,
    started_producer,
    v5_message,
)
from quorumq import limits
from quorumq.client import ClientError
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.errors import Error

OPEN_FILES = 1024  # the soft RLIMIT_NOFILE: 256 consume-queue files open at most, 256 connections
PENDING_BYTES = 8 * limits.MiB  # grpcPendingAnswerBytesPerConnection
PENDING_TOTAL = 2 * PENDING_BYTES  # grpcPendingAnswerBytesTotal: about twice that in RSS
UNREAD_MS = 5000  # grpcUnreadAnswerTimeoutMills
TOPICS = 600  # auto-created, one message each: more than the cache keeps open
GROUPS = 8 * limits.GROUPS_PER_REQUEST_MAX  # by AddConsumerGroups
RECEIVE_GROUPS = 300  # first contacts by ReceiveMessage
NEVER_CREATED = 2000  # topic names a ReceiveMessage long-polls on
IDLE = 150  # connections past the handshake, without a call
UNREAD = 6  # connections that never read, each with PullBatch and ReceiveMessage answers of 4 MiB
BODY = 1 * limits.MiB
UNPARSABLE = b"\x0a\x05ab"


def raw_call(channel, method: str, raw: bytes, answer, timeout: float = 30):
    return channel.unary_unary(method, request_serializer=lambda data: data,
                               response_deserializer=answer.FromString)(raw, timeout=timeout)


def refusal(call) -> ClientError:
    try:
        call()
    except grpc.RpcError as error:
        return ClientError.from_rpc(error)
    raise AssertionError("not refused")


def receive_request(topic: str, group: str, poll_s: float = 0.1) -> v5s.ReceiveMessageRequest:
    return v5s.ReceiveMessageRequest(
        group=v5.Resource(name=group), message_queue=v5.MessageQueue(topic=v5.Resource(name=topic)),
        filter_expression=v5.FilterExpression(type=v5.FilterType.TAG, expression="*"), batch_size=32,
        invisible_duration={"seconds": 30}, long_polling_timeout={"nanos": int(poll_s * 1e9)})


def stored_bodies(messaging: v5_grpc.MessagingServiceStub, topic: str) -> set[bytes]:
    """Every message of the topic's one queue, pulled from its first offset on."""
    bodies: set[bytes] = set()
    offset = 0
    while True:
        answers = messaging.PullMessage(v5s.PullMessageRequest(
            group=v5.Resource(name="G"), message_queue=v5.MessageQueue(topic=v5.Resource(name=topic), id=0),
            offset=offset, batch_size=limits.PULL_BATCH_MAX), timeout=30)
        messages = [answer.message for answer in answers if answer.HasField("message")]
        if not messages:
            return bodies
        bodies |= {message.body for message in messages}
        offset = messages[-1].system_properties.queue_offset + 1


def test_every_hostile_input_at_once_keeps_the_broker_small_and_every_acknowledged_message(start_cluster):
    cluster = start_cluster(open_files=OPEN_FILES, sets={
        "defaultTopicQueueNums": "1", "grpcPendingAnswerBytesPerConnection": str(PENDING_BYTES),
        "grpcPendingAnswerBytesTotal": str(PENDING_TOTAL), "grpcUnreadAnswerTimeoutMills": str(UNREAD_MS)})
    broker, namesrv = process_of(cluster, "broker"), process_of(cluster, "namesrv")
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(broker["address"], options=options) as channel, \
            grpc.insecure_channel(namesrv["address"], options=options) as names:
        hostile_load(broker, namesrv, channel, names, configuration(cluster))


def hostile_load(broker: dict, namesrv: dict, channel: grpc.Channel, names: grpc.Channel, client_config) -> None:
    messaging, admin = v5_grpc.MessagingServiceStub(channel), pb_grpc.BrokerAdminStub(channel)
    run = uuid.uuid4().hex[:6]
    sent: dict[str, set[bytes]] = {}  # topic -> the bodies acknowledged

    def send(topic: str, body: bytes) -> None:
        answer = messaging.SendMessage(v5s.SendMessageRequest(messages=[v5_message(topic, body)]), timeout=30)
        assert answer.status.code == v5.Code.OK, answer.status
        sent.setdefault(topic, set()).add(body)

    logged_before = log_end(broker)
    big = f"big-{run}"  # the answers nobody reads
    for index in range(4):
        send(big, bytes([index]) * BODY)

    steady, stop = f"steady-{run}", threading.Event()
    send(steady, b"first")
    producer = started_producer(client_config)

    def produce() -> None:  # another client, sending all along
        index = 0
        while not stop.is_set():
            body = f"steady-{index}".encode()
            producer.send(official_message(steady, body))  # raises unless acknowledged
            sent.setdefault(steady, set()).add(body)
            index += 1

    def auto_created_topics() -> None:
        for index in range(TOPICS):
            send(f"auto-{run}-{index}", f"auto-{index}".encode())

    def group_flood() -> None:
        for start in range(0, GROUPS, limits.GROUPS_PER_REQUEST_MAX):
            admin.AddConsumerGroups(pb.ConsumerGroups(groups={f"flood-{run}-{index}": 1 for index in range(
                start, start + limits.GROUPS_PER_REQUEST_MAX)}), timeout=30)
        for index in range(RECEIVE_GROUPS):
            for answer in messaging.ReceiveMessage(receive_request(steady, f"receiver-{run}-{index}"), timeout=10):
                assert answer.WhichOneof("content") != "status" or answer.status.code in (
                    v5.Code.OK, v5.Code.MESSAGE_NOT_FOUND), answer.status

    def never_created_topics() -> None:
        async def poll_all() -> None:
            async with grpc.aio.insecure_channel(broker["address"]) as aio_channel:
                stub = v5_grpc.MessagingServiceStub(aio_channel)

                async def poll(index: int) -> None:
                    async for answer in stub.ReceiveMessage(receive_request(f"never-{run}-{index}", "G"), timeout=10):
                        assert answer.status.code in (v5.Code.MESSAGE_NOT_FOUND, v5.Code.TOPIC_NOT_FOUND), answer

                for start in range(0, NEVER_CREATED, 500):
                    await asyncio.gather(*(poll(index) for index in range(start, start + 500)))
        asyncio.run(poll_all())

    pull = pb.PullBatchRequest(group="G", topic=big, queue_id=0, offset=0, max_count=4).SerializeToString()
    receive = receive_request(big, f"unread-{run}", poll_s=1).SerializeToString()
    idle, unread = [], []

    def connections() -> None:
        idle.extend(RawConnection(broker["address"]) for _ in range(IDLE))
        for _ in range(UNREAD):
            connection = RawConnection(broker["address"])
            unread.append(connection)
            for _ in range(3):
                connection.call("/quorumq.cluster.MessageReader/PullBatch", pull)
            connection.call(MESSAGING_SERVICE + "ReceiveMessage", receive)

    def huge_registration() -> None:
        head = pb.BrokerRegistration(cluster="Huge", broker_name="huge", broker_id=0, address="127.0.0.1:1",
                                     role="ASYNC_MASTER").SerializeToString()
        empty_topic = bytes([pb.BrokerRegistration.TOPICS_FIELD_NUMBER << 3 | 2, 0])
        raw = head + empty_topic * ((limits.REGISTRATION_BYTES_MAX - len(head)) // len(empty_topic))
        error = refusal(lambda: raw_call(names, "/quorumq.cluster.NameServer/RegisterBroker", raw, pb.RegisterReply))
        assert error.error is Error.TOO_MANY_REQUESTS, error

    def malformed() -> None:
        for target, method, answer in ((channel, MESSAGING_SERVICE + "SendMessage", v5s.SendMessageResponse),
                                       (channel, "/quorumq.cluster.BrokerAdmin/UpdateTopic", pb.Empty),
                                       (names, MESSAGING_SERVICE + "QueryRoute", v5s.QueryRouteResponse),
                                       (names, "/quorumq.cluster.NameServer/RegisterBroker", pb.RegisterReply)):
            error = refusal(partial(raw_call, target, method, UNPARSABLE, answer))
            assert error.error is Error.BAD_REQUEST, (method, error)

    def huge_requests() -> None:
        ack = v5s.AckMessageRequest(group=v5.Resource(name="G"), topic=v5.Resource(name=steady)).SerializeToString()
        answer = raw_call(channel, MESSAGING_SERVICE + "AckMessage", ack + b"\x1a\x00" * 300_000,
                          v5s.AckMessageResponse)
        assert answer.status.code == v5.Code.PAYLOAD_TOO_LARGE and not answer.entries, answer.status
        answer = raw_call(channel, MESSAGING_SERVICE + "SendMessage", b"\x0a\x00" * 2_000_000, v5s.SendMessageResponse)
        assert answer.status.code == v5.Code.PAYLOAD_TOO_LARGE, answer.status

    def bad_names() -> None:
        long_name = "x" * 10_000
        answer = messaging.SendMessage(v5s.SendMessageRequest(messages=[v5_message(long_name, b"x")]), timeout=10)
        assert answer.status.code == v5.Code.ILLEGAL_TOPIC and len(answer.status.message) < 2 * limits.QUOTED_TEXT_MAX
        answer = messaging.SendMessage(v5s.SendMessageRequest(messages=[v5_message("newline\n", b"x")]), timeout=10)
        assert answer.status.code == v5.Code.ILLEGAL_TOPIC, answer.status
        [answer] = messaging.ReceiveMessage(receive_request(steady, long_name), timeout=10)
        assert answer.status.code == v5.Code.ILLEGAL_CONSUMER_GROUP, answer.status
        error = refusal(lambda: admin.UpdateTopic(pb.TopicConfig(name=long_name, read_queue_nums=1,
                                                                 write_queue_nums=1, perm=6), timeout=10))
        assert error.error is Error.ILLEGAL_TOPIC and "10000 characters" in error.detail, error
        answer = messaging.QueryOffset(v5s.QueryOffsetRequest(
            message_queue=v5.MessageQueue(topic=v5.Resource(name=big), id=0),
            query_offset_policy=v5.QueryOffsetPolicy.TIMESTAMP, timestamp={"seconds": -2**62}), timeout=10)
        assert answer.status.code == v5.Code.BAD_REQUEST, answer.status

    hostile = [auto_created_topics, group_flood, never_created_topics, connections, huge_registration, malformed,
               huge_requests, bad_names]
    producing = threading.Thread(target=produce)
    producing.start()
    try:
        with ThreadPoolExecutor(len(hostile)) as pool:
            for done in [pool.submit(attack) for attack in hostile]:
                done.result()
        # The answers held for connections that never read are freed as the broker closes them.
        check_for(3 * UNREAD_MS / 1000, 0.2, lambda: "closed its connection" in log_since(broker, logged_before),
                  "a connection that reads nothing closed")
    finally:
        stop.set()
        producing.join()
        producer.shutdown()
        for connection in idle + unread:
            connection.close()

    for process in (broker, namesrv):
        peak = peak_rss_bytes(process["pid"])
        assert peak < limits.HOSTILE_LOAD_RSS_BYTES_MAX, f"{process['kind']} peak RSS {peak >> 20} MiB"
    assert len(sent[steady]) > 100 and len(sent) == TOPICS + 2, {topic: len(bodies) for topic, bodies in sent.items()}
    lost = {topic: len(missing) for topic, bodies in sent.items()
            if (missing := bodies - stored_bodies(messaging, topic))}
    assert not lost, f"acknowledged but not read back (topic: how many): {lost}"
