"""A full disk: writes are refused with DISK_FULL instead of filling it, nothing stored is lost,
and writes resume once retention has made space again. The broker's data lives on a small tmpfs."""

import time
import uuid

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import LocalCluster, check_for, cli, pid_alive, process_of, v5_message

BODY = b"d" * (128 * 1024)


def start(disk, **sets) -> tuple[LocalCluster, dict]:
    settings = {"mappedFileSizeCommitLog": str(2 * 1024 * 1024), "maxMessageSize": str(256 * 1024),
                "cleanResourceInterval": "200", "diskMaxUsedSpaceRatio": "99", **sets}
    cluster = LocalCluster(disk / "cluster", sets=settings)
    return cluster, cluster.start()


def send(stub, topic, message_id=None):
    message = v5.Message(topic=v5.Resource(name=topic), body=BODY, system_properties=v5.SystemProperties(
        message_id=message_id or uuid.uuid4().hex, message_type=v5.MessageType.NORMAL,
        body_encoding=v5.Encoding.IDENTITY))
    return stub.SendMessage(v5s.SendMessageRequest(messages=[message]), timeout=10)


def fill_until_refused(stub, topic) -> tuple[int, v5.Status]:
    for count in range(400):  # 400 x 128 KiB is twice the disk: the loop must end in a refusal
        response = send(stub, topic)
        if response.status.code != v5.Code.OK:
            return count, response.status
    raise AssertionError("the broker accepted more than the disk can hold")


def stored_count(stub, topic) -> int:
    total = 0
    for queue_id in range(8):
        queue = v5.MessageQueue(topic=v5.Resource(name=topic), id=queue_id)
        begin = stub.QueryOffset(v5s.QueryOffsetRequest(message_queue=queue,
                                                        query_offset_policy=v5.QueryOffsetPolicy.BEGINNING))
        end = stub.QueryOffset(v5s.QueryOffsetRequest(message_queue=queue,
                                                      query_offset_policy=v5.QueryOffsetPolicy.END))
        for offset in range(begin.offset, end.offset):
            pulled = list(stub.PullMessage(v5s.PullMessageRequest(
                group=v5.Resource(name="Check"), message_queue=queue, offset=offset, batch_size=1), timeout=10))
            assert pulled[1].message.body == BODY, f"queue {queue_id} offset {offset} is unreadable"
            total += 1
    return total


@pytest.mark.parametrize("refusal", ["warning-ratio", "no-space-left"])
def test_full_disk_refuses_writes_then_resumes(small_disk, refusal):
    disk = small_disk("24m")
    # "warning-ratio": refused past diskSpaceWarningLevelRatio; "no-space-left": the ratio never
    # trips, so the broker meets ENOSPC when it preallocates a segment.
    warning = "0.6" if refusal == "warning-ratio" else "1.0"
    cluster, info = start(disk, diskSpaceWarningLevelRatio=warning, diskSpaceCleanForciblyRatio="1.0")
    try:
        broker = process_of(info, "broker")
        stub = v5_grpc.MessagingServiceStub(grpc.insecure_channel(broker["address"]))
        accepted, refused = fill_until_refused(stub, "Fill")
        assert accepted > 10
        assert "DISK_FULL" in refused.message and refused.code == v5.Code.INTERNAL_SERVER_ERROR
        assert send(stub, "Fill").status.code != v5.Code.OK, "still full: still refused"
        assert pid_alive(broker["pid"])
        assert stored_count(stub, "Fill") == accepted, "an acknowledged message was lost"

        # Space comes back when retention may delete the oldest segments even though unexpired.
        result = cli("admin", "updateBrokerConfig", "-n", info["access_point"],
                     "-k", "diskSpaceCleanForciblyRatio", "-v", "0.3")
        assert result.returncode == 0, result.stderr
        check_for(30, 0.3, lambda: send(stub, "Fill").status.code == v5.Code.OK, "writes resumed")
        begin = stub.QueryOffset(v5s.QueryOffsetRequest(
            message_queue=v5.MessageQueue(topic=v5.Resource(name="Fill"), id=0),
            query_offset_policy=v5.QueryOffsetPolicy.BEGINNING))
        assert begin.offset > 0, "the deleted segments' queue entries must be gone: min offset moved forward"
    finally:
        cluster.stop()


def test_a_send_refused_for_a_full_disk_creates_no_topic(start_cluster):
    """Admission comes before auto-creation: a send to a new topic that the disk check refuses
    leaves no topic behind (autoCreateTopicEnable is on). A FIFO group's receive and forward to
    the DLQ, which write lease records, are refused as a send is: the forwarded message comes back
    when its consumer's lease ends, not held for the dead-letter writer."""
    hold_s = 30  # a forward's hold, twice syncFlushTimeout
    info = start_cluster(sets={"cleanResourceInterval": "100", "syncFlushTimeout": str(hold_s * 500)})
    broker = process_of(info, "broker")
    stub = v5_grpc.MessagingServiceStub(grpc.insecure_channel(broker["address"]))

    def admin(*args: str) -> None:
        result = cli("admin", *args, "-n", info["access_point"])
        assert result.returncode == 0, result.stderr

    def receive() -> list[v5s.ReceiveMessageResponse]:
        return list(stub.ReceiveMessage(v5s.ReceiveMessageRequest(
            group=v5.Resource(name="FifoReaders"),
            message_queue=v5.MessageQueue(topic=v5.Resource(name="Fifo"), id=-1), batch_size=1,
            invisible_duration=Duration(seconds=1)), timeout=10))

    admin("updateTopic", "-c", "DefaultCluster", "-t", "Fifo", "-a", "+message.type=FIFO")
    admin("updateSubGroup", "-c", "DefaultCluster", "-g", "FifoReaders", "-o", "true")
    message = v5_message("Fifo", b"f")
    message.system_properties.message_group, message.system_properties.message_type = "g", v5.MessageType.FIFO
    assert stub.SendMessage(v5s.SendMessageRequest(messages=[message]), timeout=10).status.code == v5.Code.OK
    _, held, _ = receive()
    admin("updateBrokerConfig", "-k", "diskSpaceWarningLevelRatio", "-v", "0.0001")  # any disk is fuller
    check_for(10, 0.05, lambda: send(stub, "Probe").status.code != v5.Code.OK, "writes refused")
    refused = send(stub, "Refused").status
    assert "DISK_FULL" in refused.message
    forwarded = time.monotonic()
    forward = stub.ForwardMessageToDeadLetterQueue(v5s.ForwardMessageToDeadLetterQueueRequest(
        group=v5.Resource(name="FifoReaders"), topic=v5.Resource(name="Fifo"),
        receipt_handle=held.message.system_properties.receipt_handle,
        message_id=held.message.system_properties.message_id), timeout=10)
    assert "DISK_FULL" in forward.status.message, forward.status
    [received] = receive()
    assert "DISK_FULL" in received.status.message, received.status
    admin("updateBrokerConfig", "-k", "diskSpaceWarningLevelRatio", "-v", "0.99")
    check_for(10, 0.05, lambda: send(stub, "Accepted").status.code == v5.Code.OK, "writes resumed")
    _, again, _ = check_for(hold_s - (time.monotonic() - forwarded) - 5, 0.2,
                            lambda: (answer := receive())[0].status.code == v5.Code.OK and answer,
                            "the forwarded message back once its consumer's lease ended")
    assert again.message.system_properties.delivery_attempt == 2

    def topics() -> list[str]:
        result = cli("admin", "topicList", "-n", info["access_point"])
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    listed = check_for(10, 0.1, lambda: "Accepted" in (names := topics()) and names, "the new topic registered")
    assert "Refused" not in listed, "a refused send created its topic"


def fill(disk) -> None:
    """Write a file until the disk has no byte left."""
    chunk = b"f" * (64 * 1024)
    with open(disk / "filler", "wb", buffering=0) as filler:
        while True:
            try:
                filler.write(chunk)
            except OSError:
                break
    with open(disk / "filler", "ab", buffering=0) as filler:  # the last partial chunk
        for _ in range(len(chunk)):
            try:
                filler.write(b"f")
            except OSError:
                return


def test_a_resend_of_a_message_stored_but_not_indexed_is_answered_from_its_copy(small_disk):
    """A full disk can fail a send after its record reached the (preallocated) commit log, when
    its consume-queue entry cannot be written: the answer is DISK_FULL, yet the record is stored
    and indexed before the next append. The producer's resend of that message id must then be
    answered from that copy, not stored again (a chaos run under F8 found an idempotent
    producer's value twice)."""
    disk = small_disk("16m")
    cluster, info = start(disk, diskSpaceWarningLevelRatio="1.0", diskSpaceCleanForciblyRatio="1.0")
    try:
        broker = process_of(info, "broker")
        stub = v5_grpc.MessagingServiceStub(grpc.insecure_channel(broker["address"]))
        made = cli("admin", "updateTopic", "-n", info["access_point"], "-t", "Unindexed", "-c", info["cluster"])
        assert made.returncode == 0, made.stderr
        assert send(stub, "Warm").status.code == v5.Code.OK  # the commit log's segment is allocated
        fill(disk)
        message_id = uuid.uuid4().hex
        first = send(stub, "Unindexed", message_id).status
        assert first.code != v5.Code.OK and "DISK_FULL" in first.message, first
        (disk / "filler").unlink()
        check_for(30, 0.2, lambda: send(stub, "Unindexed", message_id).status.code == v5.Code.OK,
                  "the resend answered once space is back")
        assert stored_count(stub, "Unindexed") == 1, "the resend was stored a second time"
        assert pid_alive(broker["pid"])
    finally:
        cluster.stop()


def test_a_forward_whose_copy_was_stored_but_not_indexed_is_copied_once(small_disk):
    """A full disk can fail a forward's DLQ copy after it reached the commit log, as a send's
    (above): the forward is answered DISK_FULL, and the client's retry with the same handle once
    space is back is answered from that copy, not stored again."""
    disk = small_disk("16m")
    cluster, info = start(disk, diskSpaceWarningLevelRatio="1.0", diskSpaceCleanForciblyRatio="1.0")
    try:
        broker = process_of(info, "broker")
        stub = v5_grpc.MessagingServiceStub(grpc.insecure_channel(broker["address"]))
        for topic in ("Origin", "%DLQ%Forwarders"):  # configs only: a queue's index file comes with its first record
            made = cli("admin", "updateTopic", "-n", info["access_point"], "-t", topic, "-c", info["cluster"])
            assert made.returncode == 0, made.stderr
        assert send(stub, "Origin").status.code == v5.Code.OK  # also allocates the commit log's segment
        _, held, _ = stub.ReceiveMessage(v5s.ReceiveMessageRequest(
            group=v5.Resource(name="Forwarders"),
            message_queue=v5.MessageQueue(topic=v5.Resource(name="Origin"), id=-1), batch_size=1,
            invisible_duration=Duration(seconds=60)), timeout=10)
        request = v5s.ForwardMessageToDeadLetterQueueRequest(
            group=v5.Resource(name="Forwarders"), topic=v5.Resource(name="Origin"),
            receipt_handle=held.message.system_properties.receipt_handle,
            message_id=held.message.system_properties.message_id)
        fill(disk)
        first = stub.ForwardMessageToDeadLetterQueue(request, timeout=10).status
        assert first.code != v5.Code.OK and "DISK_FULL" in first.message, first
        (disk / "filler").unlink()
        check_for(30, 0.2, lambda: stub.ForwardMessageToDeadLetterQueue(request, timeout=10).status.code == v5.Code.OK,
                  "the retried forward answered once space is back")
        assert stored_count(stub, "%DLQ%Forwarders") == 1, "the retry stored a second copy"
    finally:
        cluster.stop()
