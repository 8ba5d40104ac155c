"""A broker under a low open-files limit keeps serving as its topics outnumber the limit (issue 19):
it keeps at most a quarter of the limit of consume-queue files open, least recently used closed first,
and accepts at most a quarter of the limit of connections, so sockets cannot take the descriptors
its store needs."""

import os
import socket

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import process_of, v5_message
from quorumq import limits
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core import codec

OPEN_FILES = 256  # the broker's soft RLIMIT_NOFILE, as under `ulimit -n 256`
TOPICS = 300  # one consume-queue file each: more than the broker may open


def open_queue_files(pid: int) -> int:
    """The consume-queue files (named by their 20-digit start offset) the process holds open now;
    not their directories, which the checkpoint opens to sync them."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed while listed
            continue
        name = path.rpartition("/")[2]
        count += "/consumequeue/" in path and len(name) == 20 and name.isdigit()
    return count


def pulled_bodies(reader: pb_grpc.MessageReaderStub, topic: str) -> list[bytes]:
    response = reader.PullBatch(pb.PullBatchRequest(group="open-files", topic=topic, queue_id=0, offset=0,
                                                    max_count=8), timeout=10)
    bodies, position = [], 0
    while position < len(response.records):
        frame, size = codec.check_detached(response.records, position)
        assert frame is codec.Frame.MESSAGE
        bodies.append(codec.decode_message(response.records, position, "").body)
        position += size
    return bodies


def send(channel: grpc.Channel, topic: str, body: bytes) -> str:
    response = v5_grpc.MessagingServiceStub(channel).SendMessage(
        v5s.SendMessageRequest(messages=[v5_message(topic, body)]), timeout=10)
    return "OK" if response.status.code == v5.Code.OK else response.status.message


def test_more_topics_than_the_open_files_limit_allows(start_cluster):
    cluster = start_cluster(open_files=OPEN_FILES, sets={"defaultTopicQueueNums": "1"})
    broker = process_of(cluster, "broker")
    topics = [f"open-files-{number}" for number in range(TOPICS)]
    with grpc.insecure_channel(broker["address"]) as channel:
        failures = {topic: outcome for topic in topics if (outcome := send(channel, topic, topic.encode())) != "OK"}
        assert not failures, f"{len(failures)} of {TOPICS} sends failed, e.g. {next(iter(failures.items()))}"
        assert send(channel, topics[0], b"again") == "OK"  # a queue whose file was closed since

        # The cache's bound, plus the one descriptor the checkpoint may hold to sync a file closed since its writes.
        assert open_queue_files(broker["pid"]) <= limits.queue_files_open_max(OPEN_FILES) + 1
        reader = pb_grpc.MessageReaderStub(channel)
        assert pulled_bodies(reader, topics[0]) == [topics[0].encode(), b"again"]
        assert {topic: pulled_bodies(reader, topic) for topic in topics[1:]} == \
            {topic: [topic.encode()] for topic in topics[1:]}


def test_connections_cannot_take_the_descriptors_the_store_needs(start_cluster):
    """As many connections as the broker may open descriptors at all, left silent (each is closed
    after the 10 s handshake timeout): past its share gRPC closes them at once, and the store still
    opens the files of new topics meanwhile."""
    cluster = start_cluster(open_files=OPEN_FILES, sets={"defaultTopicQueueNums": "1"})
    broker = process_of(cluster, "broker")
    host, port = broker["address"].rsplit(":", 1)
    topics = [f"crowded-{number}" for number in range(TOPICS // 3)]
    with grpc.insecure_channel(broker["address"]) as channel:
        assert send(channel, "crowded", b"connected first") == "OK"
        silent = []
        try:
            silent.extend(socket.create_connection((host, int(port)), timeout=5) for _ in range(OPEN_FILES))
            failures = {topic: outcome for topic in topics
                        if (outcome := send(channel, topic, topic.encode())) != "OK"}
        finally:
            for sock in silent:
                sock.close()
    assert not failures, f"{len(failures)} of {len(topics)} sends failed, e.g. {next(iter(failures.items()))}"
