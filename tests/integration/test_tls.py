"""TLS on a real cluster (`quorumq up --tls`: a controller, a name server, a master and a slave):
a plaintext gRPC call to any port and a plaintext replication connection are refused while TLS is
served on, and the official Python client, with GRPC_DEFAULT_SSL_ROOTS_FILE_PATH naming
cluster.json's CA, sends and receives while the slave copies what it sent over the TLS replication
stream."""

import socket
import ssl
import uuid
from pathlib import Path

import grpc
import pytest

from harness import LocalCluster, check_for, official_round_trip_over_tls, process_of
from quorumq import tls
from quorumq.client import AdminClient, Blocking
from quorumq.config import read_properties
from quorumq.core.replication_frames import Ack, Handshake, encode_frame

MESSAGES = 10
TLS_ALERT = 0x15  # the record type of a TLS alert, the most a refused plaintext peer may read
# A method no server has: a served call fails UNIMPLEMENTED, one that never reached the server UNAVAILABLE.
NO_METHOD = "/quorumq.test.Nothing/Nothing"
@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("tls"), replicas=2, controllers=1, tls=True)
    try:
        info = cluster.start()
        with pytest.MonkeyPatch.context() as environment:  # quorumq's client in this process trusts the CA
            environment.setenv(tls.CA_VARIABLE, info["ca"])
            check_for(30, 0.1, lambda: status(info, broker(info, "slave"))["replicating"] == "True",
                      "the slave replicates over TLS")
            yield info
    finally:
        cluster.stop()


def broker(cluster: dict, role: str) -> dict:
    return next(p for p in cluster["processes"] if p["kind"] == "broker" and p["role"] == role)


def status(cluster: dict, process: dict) -> dict[str, str]:
    with Blocking(AdminClient, cluster["access_point"], timeout_s=5.0) as admin:
        return admin.broker_status(process["address"])


def test_plaintext_to_every_grpc_port_is_refused_and_tls_is_served_on(tls_cluster):
    ca = Path(tls_cluster["ca"]).read_bytes()
    ports = [p["address"] for p in tls_cluster["processes"] if p["kind"] in ("namesrv", "broker", "controller")]
    assert len(ports) == 4
    for address in ports:
        with grpc.insecure_channel(address) as plain, pytest.raises(grpc.RpcError) as refused:
            plain.unary_unary(NO_METHOD)(b"", timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE, (address, refused.value)
        with grpc.secure_channel(address, grpc.ssl_channel_credentials(ca)) as secure, \
                pytest.raises(grpc.RpcError) as served:
            secure.unary_unary(NO_METHOD)(b"", timeout=5)
        assert served.value.code() is grpc.StatusCode.UNIMPLEMENTED, (address, served.value)


def test_a_plaintext_replication_connection_gets_no_byte_of_the_log(tls_cluster):
    master, slave = broker(tls_cluster, "master"), broker(tls_cluster, "slave")
    config = read_properties(Path(master["config"]).read_text())
    with socket.create_connection(("127.0.0.1", int(config["haListenPort"])), timeout=10) as raw:
        # A slave's handshake from offset 0, as a stranger on the HA network would send it.
        raw.sendall(encode_frame(Handshake(5, config["brokerClusterName"], config["brokerName"], 0, 0, False))
                    + encode_frame(Ack(0, 0)))
        received = b""
        try:
            while chunk := raw.recv(65536):  # until the master closes the connection
                received += chunk
        except TimeoutError:
            pytest.fail(f"the master kept a plaintext replication connection open; it sent {received[:64]!r}")
    assert received == b"" or received[0] == TLS_ALERT and len(received) <= 7, received[:64]
    assert status(tls_cluster, master)["slaves"] == str(slave["broker_id"])  # the real slave, over TLS, alone
    assert status(tls_cluster, slave)["replicating"] == "True"


def test_the_official_client_sends_and_receives_over_tls_and_the_slave_copies(tls_cluster):
    topic = f"Tls{uuid.uuid4().hex[:8]}"
    sent, received = official_round_trip_over_tls(tls_cluster, topic, MESSAGES)
    assert len(sent) == MESSAGES and sorted(received) == sorted(sent)
    master, slave = broker(tls_cluster, "master"), broker(tls_cluster, "slave")
    end = int(status(tls_cluster, master)["commitLogMaxOffset"])
    check_for(15, 0.1, lambda: int(status(tls_cluster, slave)["commitLogMaxOffset"]) >= end > 0,
              "the slave holds the master's log")


def test_mutual_tls_admits_members_and_holders_of_a_certificate_alone(start_cluster, monkeypatch):
    """tls.server.need.client.auth=require: the members (up's checks, the slave on the HA port)
    present their certificates; a client that trusts the CA but has none is refused on the gRPC
    ports and on the HA port, one with a certificate from the CA is served."""
    cluster = start_cluster(replicas=2, tls=True, sets={"tls.server.need.client.auth": "require"})
    files = Path(cluster["ca"]).parent
    monkeypatch.setenv(tls.CA_VARIABLE, cluster["ca"])
    monkeypatch.setenv(tls.CERT_VARIABLE, str(files / "server.pem"))
    monkeypatch.setenv(tls.KEY_VARIABLE, str(files / "server.key"))
    master, slave = broker(cluster, "master"), broker(cluster, "slave")
    check_for(30, 0.1, lambda: status(cluster, slave)["replicating"] == "True", "the slave replicates over mTLS")
    ca = Path(cluster["ca"]).read_bytes()
    for process in (process_of(cluster, "namesrv"), master):
        with grpc.secure_channel(process["address"], grpc.ssl_channel_credentials(ca)) as no_certificate, \
                pytest.raises(grpc.RpcError) as refused:
            no_certificate.unary_unary(NO_METHOD)(b"", timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE, (process["address"], refused.value)
    ha_port = int(read_properties(Path(master["config"]).read_text())["haListenPort"])
    context = tls.ClientTls(cluster["ca"]).context()
    with socket.create_connection(("127.0.0.1", ha_port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as secure:
                # Under TLS 1.3 the client's handshake ends before the server checks its certificate.
                secure.sendall(encode_frame(Handshake(5, cluster["cluster"], master["broker_name"], 0, 0, False)))
                received = secure.recv(65536)
        except (ssl.SSLError, ConnectionError):
            received = b""
    assert received == b"", received[:64]
    assert status(cluster, master)["slaves"] == str(slave["broker_id"])
