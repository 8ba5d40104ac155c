"""A fake master on the HA port (issue 22): what a slave receives is checked like client input. A
stranger that took the stopped master's HA port streams records whose topic is a relative or an
absolute path, or not UTF-8, whose queue id is negative, or whose queue offset is negative where a
log begins; the real slave stores none of them, creates no file, logs why, and keeps serving."""

import socket
import threading
from contextlib import closing
from pathlib import Path

import pytest

from harness import TEST_SEGMENT_BYTES, LocalCluster, check_for, log_end, log_since, stop_process
from quorumq.config import read_properties
from quorumq.core import codec
from quorumq.core.replication_frames import NEED_DATA, Data, Handshake, ReplicationConnection, Role, encode_frame
from replica_group import ReplicaGroup

PWNED = b"PWNED"  # in every bad record's topic, to look for in the slave's files


def record(topic: bytes, queue_id: int, log_offset: int, queue_offset: int = 0) -> bytes:
    """One commit-log record, its CRC right: only its fields break the rules."""
    properties, body = codec.encode_properties({"UNIQ_KEY": "fake"}), b"from a fake master"
    size = codec.record_size(topic, b"127.0.0.1:1", properties, body)
    data = bytearray(size)
    codec.encode_record(memoryview(data), 0, size, topic, queue_id, 0, 0, 1, b"127.0.0.1:1", 0, properties, body,
                        queue_offset, log_offset, 1)
    return bytes(data)


class FakeMaster:
    """Listens on the HA port and answers each slave session with the next bad DATA frame of
    `frames` (each a function of where the slave's log ends), then reads until the slave hangs up."""

    def __init__(self, port: int, frames) -> None:
        self.frames = frames
        self.sessions = 0
        self.server = socket.create_server(("127.0.0.1", port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while True:
                connection, _ = self.server.accept()
                with connection:
                    self._session(connection)
        except OSError:
            pass  # closed

    def _session(self, connection: socket.socket) -> None:
        codec_ = ReplicationConnection(Role.MASTER)
        handshake = NEED_DATA
        while not isinstance(handshake, Handshake):
            if not (chunk := connection.recv(65536)):
                return
            codec_.feed(chunk)
            handshake = codec_.next_event()
        offset, data = self.frames[self.sessions % len(self.frames)](handshake.max_offset)
        self.sessions += 1
        connection.sendall(encode_frame(Data(0, 0, offset, 0, data)))
        while connection.recv(65536):
            pass

    def close(self) -> None:
        self.server.close()
        self.thread.join(10)


@pytest.fixture
def lone_slave(tmp_path):
    """broker-a's slave, its master stopped and a fake one on the master's HA port."""
    cluster = LocalCluster(tmp_path / "cluster", replicas=2, sets={"registerNameServerPeriod": "1000"})
    try:
        info = cluster.start()
        with closing(ReplicaGroup(info)) as group:
            group.wait_in_sync()
            assert group.log_end(group.slave) == 0  # empty: a log that begins past 0 is one of the cases
            stop_process(group.master)
            yield group
    finally:
        cluster.stop()


def test_a_fake_masters_bad_records_are_refused_and_touch_no_file(lone_slave, tmp_path):
    group, slave = lone_slave, lone_slave.slave
    store = Path(read_properties(Path(slave["config"]).read_text())["storePathRootDir"])
    absolute = tmp_path / "PWNED_ABSOLUTE"
    frames = [  # a bad record each, and what the slave logs about it
        (lambda end: (end, record(b"../../../../PWNED_RELATIVE", 0, end)), "'../../../../PWNED_RELATIVE'"),
        (lambda end: (end, record(str(absolute).encode(), 0, end)), repr(str(absolute))),
        (lambda end: (end, record(b"PWNED_QUEUE", -1, end)), "queue id -1"),
        (lambda end: (end, record(b"\xffPWNED", 0, end)), "its topic is not UTF-8"),
        # An empty log begins where the master's does: the queue offset names the queue's first file.
        (lambda end: (TEST_SEGMENT_BYTES, record(b"PWNED_OFFSET", 0, TEST_SEGMENT_BYTES, -5)), "queue offset -5"),
    ]
    master_config = read_properties(Path(group.master["config"]).read_text())
    start = log_end(slave)
    with closing(FakeMaster(int(master_config["haListenPort"]), [frame for frame, _ in frames])):
        check_for(20, 0.1, lambda: all(why in log_since(slave, start) for _, why in frames),
                  "the slave logged each refusal")
    text = log_since(slave, start)
    assert text.count("records from the master at") >= len(frames), text
    assert "stopped by a bug" not in text, text

    assert group.log_end(slave) == 0  # nothing appended
    for segment in (store / "commitlog").iterdir():
        assert PWNED not in segment.read_bytes(), segment
    # `..` from the consume queues' directory climbs to one of the store's parents, at most to /.
    made = [path for directory in store.parents for path in directory.glob("*PWNED*")]
    assert not made and not absolute.exists(), made
    assert not [*(store / "consumequeue").rglob("*")]  # no queue made at all
    assert group.status(slave)["brokerRole"] == "SLAVE"  # still up and answering
