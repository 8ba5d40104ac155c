"""The HA port with authenticationEnabled (issue 22): a stranger that connects to a master's HA port
as a slave gets no byte of the commit log and its acks count toward no quorum; the real slaves,
which answer the master's challenge with the inner credentials, replicate as before."""

import socket
import threading
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from harness import LocalCluster, check_for, frozen, log_end, log_since
from quorumq.client import Credentials
from quorumq.config import read_properties
from quorumq.core.replication_auth import CHALLENGE_BYTES, decode_challenge, encode_answer
from quorumq.core.replication_frames import NEED_DATA, Ack, Data, Handshake, ReplicationConnection, Role, encode_frame
from replica_group import ReplicaGroup

INNER, INNER_SECRET = "inner", "inner-secret-22"
SLAVE_TIMEOUT_MS = 1500
FAKE_ID = 7  # no replica of the group has it


@pytest.fixture(scope="module")
def secured_group(tmp_path_factory):
    """broker-a: a SYNC_MASTER and two slaves, inSyncReplicas=3, authentication on."""
    cluster = LocalCluster(tmp_path_factory.mktemp("ha-auth"), replicas=3, sets={
        "registerNameServerPeriod": "1000", "brokerRole": "SYNC_MASTER", "inSyncReplicas": "3",
        "slaveTimeout": str(SLAVE_TIMEOUT_MS), "authenticationEnabled": "true",
        "innerClientAuthenticationCredentials": f'{{"accessKey": "{INNER}", "secretKey": "{INNER_SECRET}"}}'})
    try:
        info = cluster.start()
        with closing(ReplicaGroup(info, send_timeout_s=15.0, credentials=Credentials(INNER, INNER_SECRET))) as group:
            group.wait_in_sync()
            yield group
    finally:
        cluster.stop()


class FakeSlave:
    """A stranger on the HA network: it sends a slave's handshake from offset 0 and acks every DATA
    frame it receives at once, without storing anything. `answer_secret`: it answers a challenge
    as if it held the inner access key with this secret."""

    def __init__(self, group: ReplicaGroup, answer_secret: str | None = None) -> None:
        config = read_properties(Path(group.master["config"]).read_text())
        self.handshake = Handshake(FAKE_ID, config["brokerClusterName"], config["brokerName"], 0, 0, False)
        self.socket = socket.create_connection(("127.0.0.1", int(config["haListenPort"])), timeout=30)
        self.received = b""
        self.data_frames = 0
        if answer_secret is None:
            self.socket.sendall(encode_frame(self.handshake) + encode_frame(Ack(0, 0)))
        else:
            nonce = None
            while nonce is None:
                self.received += self.socket.recv(CHALLENGE_BYTES - len(self.received))
                nonce = decode_challenge(self.received)
            self.socket.sendall(encode_answer(Credentials(INNER, answer_secret), nonce, self.handshake)
                                + encode_frame(self.handshake) + encode_frame(Ack(0, 0)))
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._ack_everything, daemon=True)
        self.thread.start()

    def _ack_everything(self) -> None:
        codec = ReplicationConnection(Role.SLAVE)
        codec.encode(self.handshake)
        try:
            while chunk := self.socket.recv(65536):
                self.received += chunk
                if chunk.startswith(b"QQC1"):  # a challenge it cannot answer
                    continue
                codec.feed(chunk)
                while (event := codec.next_event()) is not NEED_DATA:
                    if isinstance(event, Data):
                        self.data_frames += 1
                        self.socket.sendall(codec.encode(Ack(event.end_offset, event.end_offset)))
        except OSError:
            pass
        finally:
            self.closed.set()

    def close(self) -> None:
        self.socket.close()
        self.thread.join(10)


@pytest.mark.parametrize("answer_secret", [None, "a-guessed-secret"], ids=["no-answer", "wrong-secret"])
def test_a_fake_slave_gets_no_log_and_its_acks_make_no_quorum(secured_group, answer_secret):
    group = secured_group
    real_slave, other_slave = group.slaves
    topic = group.new_topic()
    assert group.send_message(topic, b"before").status == "SEND_OK"
    with frozen(other_slave):  # one real slave left: with the fake's acks it would be 3 copies
        with closing(FakeSlave(group, answer_secret)) as fake:
            result = group.send_message(topic, b"needs three copies")
            assert result.status == "FLUSH_SLAVE_TIMEOUT", result
            assert fake.closed.wait(15), "the master kept the fake slave's connection open"
            # The master's challenge, then nothing: no byte of the log.
            assert fake.data_frames == 0 and len(fake.received) == CHALLENGE_BYTES, fake.received[:80]
            assert decode_challenge(fake.received) is not None
            assert str(FAKE_ID) not in group.status()["slaves"].split(",")
    group.wait_in_sync()
    last = group.send_message(topic, b"with both real slaves")
    assert last.status == "SEND_OK", last
    for slave in (real_slave, other_slave):  # each real slave holds every message
        group.wait_caught_up(slave)


def test_the_master_logs_the_refusal_without_the_secret(secured_group):
    group = secured_group
    start = log_end(group.master)
    guessed = "wrong-" + uuid.uuid4().hex
    with closing(FakeSlave(group, guessed)) as fake:
        assert fake.closed.wait(15)
    text = check_for(10, 0.1, lambda: "not authenticated" in (t := log_since(group.master, start)) and t,
                     "the refusal logged")
    assert f"slave {FAKE_ID} not authenticated: wrong proof for access key '{INNER}'" in text, text
    assert INNER_SECRET not in text and guessed not in text
