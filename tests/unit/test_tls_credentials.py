"""TLS settings (config.py's tls.* keys) and the credentials tls.py builds from them, with the
throwaway certificates of `quorumq up --tls` (cli/certs.py): a handshake on a loopback socket
succeeds with the cluster's CA and fails with another one; a gRPC server in this process refuses a
plaintext channel and serves one that trusts its CA."""

import asyncio
import ssl

import grpc
import pytest

from quorumq import tls
from quorumq.cli import certs
from quorumq.cli.up import plan
from quorumq.client.routes import open_channel
from quorumq.clock import Clock
from quorumq.config import Config, Kind
from quorumq.errors import Error, QuorumqError
from quorumq.listen import grpc_server

NO_METHOD = "/quorumq.test.Nothing/Nothing"
NOT_SERVED = grpc.StatusCode.UNIMPLEMENTED  # the call reached the server, which has no such method


def refused(kind: Kind, values: dict[str, str]) -> str:
    with pytest.raises(QuorumqError) as caught:
        Config(kind, values)
    assert caught.value.error is Error.CONFIG_INVALID
    return str(caught.value)


@pytest.mark.parametrize("kind", list(Kind))
def test_enforcing_needs_a_certificate_and_its_key(kind):
    needed = {"namesrvAddr": "127.0.0.1:9876"} if kind is Kind.PROXY else {}
    assert "tls.server.certPath" in refused(kind, {**needed, "tls.server.mode": "enforcing",
                                                   "tls.server.keyPath": "k.pem"})
    assert "tls.server.keyPath" in refused(kind, {**needed, "tls.server.mode": "enforcing",
                                                  "tls.server.certPath": "c.pem"})
    config = Config(kind, {**needed, "tls.server.mode": "enforcing", "tls.server.certPath": "c.pem",
                           "tls.server.keyPath": "k.pem"})
    assert config["tls.server.need.client.auth"] == "none"


def test_a_mode_other_than_disabled_or_enforcing_is_refused():
    # RocketMQ's permissive mode serves TLS and plaintext on one port, which a gRPC port cannot.
    message = refused(Kind.BROKER, {"tls.server.mode": "permissive"})
    assert "tls.server.mode" in message and "disabled, enforcing" in message


def test_mutual_tls_needs_enforcing_and_a_trusted_ca():
    enforcing = {"tls.server.mode": "enforcing", "tls.server.certPath": "c.pem", "tls.server.keyPath": "k.pem"}
    assert "tls.server.trustCertPath" in refused(Kind.NAMESRV, {**enforcing, "tls.server.need.client.auth": "require"})
    assert "tls.server.mode=enforcing" in refused(Kind.CONTROLLER, {"tls.server.need.client.auth": "require",
                                                                    "tls.server.trustCertPath": "ca.pem"})
    assert "tls.server.need.client.auth" in refused(Kind.BROKER, {"tls.server.need.client.auth": "optional"})


def test_a_member_talks_tls_as_it_serves_it_and_others_as_the_environment_says(monkeypatch, tmp_path):
    assert tls.ClientTls.of_member(Config(Kind.BROKER, {})) is None
    files = {key: str(path) for key, path in certs.paths(tmp_path).items()}
    member = tls.ClientTls.of_member(Config(Kind.BROKER, {"tls.server.mode": "enforcing", **files}))
    assert member == tls.ClientTls(files["tls.server.trustCertPath"], files["tls.server.certPath"],
                                   files["tls.server.keyPath"])
    monkeypatch.delenv(tls.CA_VARIABLE, raising=False)
    assert tls.ClientTls.from_environment() is None
    monkeypatch.setenv(tls.CA_VARIABLE, "/ca.pem")
    assert tls.ClientTls.from_environment() == tls.ClientTls("/ca.pem")
    assert tls.ClientTls.from_environment().environment()[tls.CA_VARIABLE] == "/ca.pem"


def test_up_tls_settings_reach_every_process_kind(tmp_path):
    files = certs.paths(tmp_path / "tls")
    sets = [("tls.server.mode", "enforcing"), *((key, str(path)) for key, path in files.items())]
    planned = plan(tmp_path, 20000, 1, "C", sets, [], replicas=2, controllers=1)
    assert {p.kind for p in planned} == set(Kind) - {Kind.PROXY}  # proxies only with --proxies
    assert all(p.values["tls.server.mode"] == "enforcing" for p in planned)


def test_a_missing_certificate_is_a_config_error_naming_it(tmp_path):
    config = Config(Kind.BROKER, {"tls.server.mode": "enforcing", "tls.server.certPath": str(tmp_path / "no.pem"),
                                  "tls.server.keyPath": str(tmp_path / "no.key")})
    with pytest.raises(QuorumqError, match="no.key"):
        tls.server_credentials(config)
    with pytest.raises(QuorumqError, match="cannot load"):
        tls.server_context(config)


async def echoed(server: ssl.SSLContext, client: ssl.SSLContext) -> bool:
    """Whether a line sent over TLS on a loopback socket, as the HA stream connects, comes back.
    Under TLS 1.3 a server refuses a client's certificate after the client's handshake is done:
    the client then reads the end of the stream."""
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server)
    try:
        port = listener.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            writer.write(b"hello\n")
            line = await reader.readline()
            writer.close()
        except (ssl.SSLError, ConnectionError):
            return False
        return line == b"hello\n"
    finally:
        listener.close()
        await listener.wait_closed()


async def test_the_throwaway_certificate_serves_127_0_0_1_to_those_trusting_its_ca(tmp_path):
    files = {key: str(path) for key, path in certs.write(tmp_path / "a").items()}
    other = certs.write(tmp_path / "b")
    assert (tmp_path / "a" / "server.key").stat().st_mode & 0o077 == 0
    mutual = Config(Kind.BROKER, {"tls.server.mode": "enforcing", "tls.server.need.client.auth": "require", **files})
    server = tls.server_context(mutual)
    assert server is not None and server.minimum_version is ssl.TLSVersion.TLSv1_2
    member = tls.ClientTls.of_member(mutual)
    assert member is not None
    assert await echoed(server, member.context())
    # Another cluster's CA: the server's certificate is not trusted.
    assert not await echoed(server, tls.ClientTls(str(other["tls.server.trustCertPath"])).context())
    # The server trusted, but no client certificate under need.client.auth=require.
    assert not await echoed(server, tls.ClientTls(files["tls.server.trustCertPath"]).context())


async def test_a_tls_grpc_server_refuses_plaintext_and_serves_a_channel_trusting_its_ca(monkeypatch, tmp_path):
    """listen.grpc_server and client/routes.open_channel, in this process."""
    files = {key: str(path) for key, path in certs.write(tmp_path).items()}
    server = grpc_server("127.0.0.1:0", config=Config(Kind.NAMESRV, {"tls.server.mode": "enforcing", **files}),
                         clock=Clock())
    await server.start()
    try:
        address = f"127.0.0.1:{server.port}"
        monkeypatch.delenv(tls.CA_VARIABLE, raising=False)
        for ca, code in (("", grpc.StatusCode.UNAVAILABLE), (files["tls.server.trustCertPath"], NOT_SERVED)):
            if ca:
                monkeypatch.setenv(tls.CA_VARIABLE, ca)
            channel = open_channel(address)
            try:
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await channel.unary_unary(NO_METHOD)(b"", timeout=5)
                assert failed.value.code() is code
            finally:
                await channel.close()
    finally:
        await server.stop(None)
