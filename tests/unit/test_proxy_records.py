"""A proxy's merged sends as records: each message checked as the broker checks it, to the queue
the broker would pick, the ones SendBatch cannot carry left to v5, and the broker's answer to a
SendBatch read back as the entries its v5 SendMessage gives."""

from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import codec, properties
from quorumq.core.message_types import fifo_queue
from quorumq.errors import Error
from quorumq.protocol.wire_errors import v5_code
from quorumq.proxy import records


def message(body: bytes = b"x", topic: str = "T", **system) -> v5.Message:
    system.setdefault("message_id", f"id-{body.decode()}")
    return v5.Message(topic=v5.Resource(name=topic), body=body, system_properties=v5.SystemProperties(**system))


def test_each_message_goes_where_the_broker_would_take_it():
    messages = [message(b"a", tag="A", keys=["k"]), message(b"b", message_group="g1"),
                message(b"c", delivery_timestamp={"seconds": 1}),
                message(b"d", message_type=v5.MessageType.TRANSACTION), message(b"e", topic="Other"),
                message(b"f" * 11), message(b"g")]
    planned = records.plan(messages, "T", max_body_bytes=10, queue_count=4, turn=6)
    assert [[record.index for record in queued] for queued in planned.queues.values()] == [[0, 6], [1]]
    assert list(planned.queues) == [2, fifo_queue("g1", 4)]  # turn 6 of 4 queues; the group's queue
    assert planned.v5_indexes == [2, 3, 4]  # a delay, a transaction, another topic
    refused = planned.entries[5]
    assert (refused.status.code, refused.message_id, refused.transaction_id, refused.offset) == (
        v5_code(Error.MESSAGE_BODY_TOO_LARGE), "id-fff" + "f" * 8, "id-fff" + "f" * 8, 0)
    assert [entry is None for entry in planned.entries] == [True] * 5 + [False, True]


def test_a_request_holds_each_record_as_the_broker_stores_it():
    planned = records.plan([message(b"a", tag="A", born_host="10.0.0.1"), message(b"b", keys=["k1", "k2"])],
                           "T", 100, 1, 0)
    request = pb.SendBatchRequest.FromString(records.batch_request("T", 0, planned.queues[0]))
    assert (request.topic, request.queue_id, request.count, request.request_id) == ("T", 0, 2, "id-a")
    stored = codec.records_properties(request.records, 2)
    assert [(props[properties.MESSAGE_ID], props.get(properties.TAGS), props.get(properties.KEYS))
            for props in stored] == [("id-a", "A", None), ("id-b", None, "k1 k2")]
    first = codec.decode_message(request.records, 0, "")
    assert (first.body, first.born_host, first.queue_id) == (b"a", "10.0.0.1", 0)


def test_a_batch_answer_reads_as_the_v5_entries():
    messages = [message(b"a"), message(b"b")]
    queued = records.plan(messages, "T", 100, 1, 0).queues[0]
    stored = records.stored_entries(pb.SendBatchResponse(status="SEND_OK", first_queue_offset=7, count=2),
                                    queued, messages)
    assert [(index, entry.status.code, entry.message_id, entry.transaction_id, entry.offset)
            for index, entry in stored] == [(0, v5.Code.OK, "id-a", "id-a", 7), (1, v5.Code.OK, "id-b", "id-b", 8)]
    refused = records.stored_entries(pb.SendBatchResponse(status="IN_SYNC_REPLICAS_NOT_ENOUGH"), queued, messages)
    assert [(entry.status.code, entry.offset) for _, entry in refused] == [(v5.Code.HA_NOT_AVAILABLE, 0)] * 2
