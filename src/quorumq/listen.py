"""The gRPC servers' listening socket and what gRPC logs about their calls, one rule for the name
server, broker and controller."""

import logging
from collections.abc import Sequence

import grpc

from quorumq.errors import Error, QuorumqError

GRPC_CORE_LOGGER = "grpc._cython.cygrpc"
UNDELIVERED_MARK = "ExecuteBatchError raised in core by servicer method"


class UndeliveredResponse(logging.Filter):
    """gRPC logs a response it could not send, because its client's connection closed or was reset
    while the handler ran (a client that gave up, a partition), as an ERROR with a traceback from
    its core. Nothing failed on the server: say so in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(UNDELIVERED_MARK):
            method = message[len(UNDELIVERED_MARK):].strip(" []")
            record.msg, record.args = "%s: the answer was not delivered, the client's connection closed first", (method,)
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.exc_info = record.exc_text = None
        return True


_UNDELIVERED = UndeliveredResponse()


def grpc_server(address: str, options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Server:
    """A gRPC server that owns `address` alone. gRPC sets SO_REUSEPORT by default, so a second
    process configured with a taken port would bind it too and silently take a share of its
    connections (clients then reach whichever process the kernel picks); here it fails to start."""
    logging.getLogger(GRPC_CORE_LOGGER).addFilter(_UNDELIVERED)  # once: a logger keeps one of each filter
    server = grpc.aio.server(options=[*options, ("grpc.so_reuseport", 0)])
    try:
        server.add_insecure_port(address)
    except RuntimeError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {address} (in use, or not "
                                                 f"an address of this host): {error}") from None
    return server
