"""The gRPC servers' listening socket, one rule for the name server, broker and controller."""

from collections.abc import Sequence

import grpc

from quorumq.errors import Error, QuorumqError


def grpc_server(address: str, options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Server:
    """A gRPC server that owns `address` alone. gRPC sets SO_REUSEPORT by default, so a second
    process configured with a taken port would bind it too and silently take a share of its
    connections (clients then reach whichever process the kernel picks); here it fails to start."""
    server = grpc.aio.server(options=[*options, ("grpc.so_reuseport", 0)])
    try:
        server.add_insecure_port(address)
    except RuntimeError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {address} (in use, or not "
                                                 f"an address of this host): {error}") from None
    return server
