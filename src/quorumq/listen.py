"""The gRPC servers' listening socket and what gRPC logs about their calls, one rule for the name
server, broker and controller."""

import logging
from collections.abc import Sequence

import grpc

from quorumq.errors import Error, QuorumqError

GRPC_CORE_LOGGER = "grpc._cython.cygrpc"
UNDELIVERED_MARK = "ExecuteBatchError raised in core by servicer method"
UNSENT_BATCH = 'Failed "execute_batch"'  # the answer's batch, as opposed to one gRPC refused to start


class UndeliveredResponse(logging.Filter):
    """gRPC logs an answer it could not send, because the call ended on the client's side while
    the handler ran (cancelled, past its deadline, the connection lost in a partition), as an
    ERROR with a traceback from its core. Nothing failed on the server: say so in one line. Other
    batch failures (a call gRPC refused to start) keep their level and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        if message.startswith(UNDELIVERED_MARK) and str(error).startswith(UNSENT_BATCH):
            method = message[len(UNDELIVERED_MARK):].strip(" []")
            record.msg, record.args = ("%s: the call ended on the client's side (cancelled, past its deadline or "
                                       "its connection lost) before the answer was sent", (method,))
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.exc_info = record.exc_text = None
        return True


_UNDELIVERED = UndeliveredResponse()


def grpc_server(address: str, options: Sequence[tuple[str, object]] = (),
                interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> grpc.aio.Server:
    """A gRPC server that owns `address` alone. gRPC sets SO_REUSEPORT by default, so a second
    process configured with a taken port would bind it too and silently take a share of its
    connections (clients then reach whichever process the kernel picks); here it fails to start."""
    logging.getLogger(GRPC_CORE_LOGGER).addFilter(_UNDELIVERED)  # once: a logger keeps one of each filter
    server = grpc.aio.server(options=[*options, ("grpc.so_reuseport", 0)], interceptors=list(interceptors) or None)
    try:
        server.add_insecure_port(address)
    except RuntimeError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {address} (in use, or not "
                                                 f"an address of this host): {error}") from None
    return server
