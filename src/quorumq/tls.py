"""TLS on every gRPC port and on the replication (HA) stream, with RocketMQ's keys (config.py).

A process serves TLS on both of its listening ports when its `tls.server.mode` is enforcing
(`server_credentials`, `server_context`). Every connection a process opens (gRPC channels through
client/routes.open_channel, a slave's HA connection) follows one `ClientTls`: in a server process
its own config (cluster members talk TLS to each other when they serve it, trusting
`tls.server.trustCertPath` and presenting their own certificate when a peer asks for one); in any
other process (quorumq's client, `quorumq admin`, the dashboard) the environment, where
QUORUMQ_TLS_CA names the CA to trust and turns TLS on, and QUORUMQ_TLS_CERT and QUORUMQ_TLS_KEY a
client certificate for a server that requires one.
"""

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from quorumq.errors import Error, QuorumqError

TLS_VERSION_MIN = ssl.TLSVersion.TLSv1_2  # gRPC's own minimum too
CA_VARIABLE = "QUORUMQ_TLS_CA"
CERT_VARIABLE = "QUORUMQ_TLS_CERT"
KEY_VARIABLE = "QUORUMQ_TLS_KEY"


class Config(Protocol):
    """A process's config.Config (the same layer as this module, so not imported)."""

    def __getitem__(self, name: str) -> Any: ...


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"TLS: cannot read {path}: {error.strerror}") from None


def _checked(context: ssl.SSLContext, load) -> ssl.SSLContext:
    """The context after `load(context)` (its certificates), a file that does not load a config error."""
    context.minimum_version = TLS_VERSION_MIN
    try:
        load(context)
    except (OSError, ssl.SSLError) as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"TLS: cannot load a certificate or key: {error}") from None
    return context


def _enforcing(config: Config) -> bool:
    return config["tls.server.mode"] == "enforcing"


def _mutual(config: Config) -> bool:
    return config["tls.server.need.client.auth"] == "require"


def server_credentials(config: Config) -> grpc.ServerCredentials | None:
    """What the process's gRPC port serves TLS with; None: plaintext."""
    if not _enforcing(config):
        return None
    mutual = _mutual(config)
    return grpc.ssl_server_credentials(
        [(_read(config["tls.server.keyPath"]), _read(config["tls.server.certPath"]))],
        root_certificates=_read(config["tls.server.trustCertPath"]) if mutual else None,
        require_client_auth=mutual)


def server_context(config: Config) -> ssl.SSLContext | None:
    """What a master's HA port serves TLS with; None: plaintext."""
    if not _enforcing(config):
        return None

    def load(context: ssl.SSLContext) -> None:
        context.load_cert_chain(config["tls.server.certPath"], config["tls.server.keyPath"])
        if _mutual(config):
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(config["tls.server.trustCertPath"])
    return _checked(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), load)


@dataclass(frozen=True)
class ClientTls:
    """What a process's outgoing connections trust and present. The server's name is checked
    against its certificate: a host given as an IP address needs an IP SAN."""

    ca: str  # PEM file of the CA to trust; "": the system's roots
    cert: str = ""  # PEM chain presented to a server that asks for one; "": none
    key: str = ""

    @classmethod
    def of_member(cls, config: Config) -> "ClientTls | None":
        if not _enforcing(config):
            return None
        return cls(config["tls.server.trustCertPath"], config["tls.server.certPath"], config["tls.server.keyPath"])

    @classmethod
    def from_environment(cls) -> "ClientTls | None":
        ca = os.environ.get(CA_VARIABLE, "")
        return cls(ca, os.environ.get(CERT_VARIABLE, ""), os.environ.get(KEY_VARIABLE, "")) if ca else None

    def environment(self) -> dict[str, str]:
        """The variables that give a child process (the dashboard) this TLS."""
        return {CA_VARIABLE: self.ca, CERT_VARIABLE: self.cert, KEY_VARIABLE: self.key}

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(_read(self.ca) if self.ca else None,
                                            _read(self.key) if self.cert else None,
                                            _read(self.cert) if self.cert else None)

    def context(self) -> ssl.SSLContext:
        def load(context: ssl.SSLContext) -> None:
            if self.ca:
                context.load_verify_locations(self.ca)
            else:
                context.load_default_certs()
            if self.cert:
                context.load_cert_chain(self.cert, self.key)
        return _checked(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), load)


_member: list[ClientTls | None] = []  # set once in a server process: its own config


def use_member_tls(config: Config) -> None:
    """A server process's connections follow its config, whatever its environment says."""
    _member[:] = [ClientTls.of_member(config)]


def client_tls() -> ClientTls | None:
    """What this process's next connection follows; None: plaintext."""
    return _member[0] if _member else ClientTls.from_environment()
