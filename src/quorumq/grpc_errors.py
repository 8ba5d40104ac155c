"""How a catalogue error (errors.py) ends a failed gRPC call, on every port of every server: with
the entry's gRPC status and a `quorumq.cluster.Error` (the entry's code and a detail) in the
trailing metadata, so a client reads the entry from a number, never from text (cluster.proto).
The v5 service answers a rule a request breaks with a v5 status instead (protocol/wire_errors.py);
this is how its calls fail where no v5 answer can carry the error (the limits on connections, a
request that does not parse). It sits below listen.py and connection_limits.py, which end calls
before any service sees them."""

from collections.abc import Iterable
from typing import NoReturn

import grpc

from quorumq.cluster import cluster_pb2 as pb
from quorumq.errors import Error, QuorumqError

# The trailing metadata key of a failed call's Error ("-bin": gRPC carries the value as bytes).
ERROR_KEY = "quorumq-error-bin"

# Each entry's gRPC status, as the catalogue names it.
GRPC_STATUSES: dict[Error, grpc.StatusCode] = {error: grpc.StatusCode[error.value.grpc_status] for error in Error}


def grpc_status(error: Error) -> grpc.StatusCode:
    return GRPC_STATUSES[error]


def trailing_metadata(error: Error, detail: str) -> tuple[tuple[str, bytes], ...]:
    return ((ERROR_KEY, pb.Error(code=error.code, detail=detail).SerializeToString()),)


async def abort(context: grpc.aio.ServicerContext, exc: QuorumqError) -> NoReturn:
    """End the call with the error's gRPC status and its Error in the trailing metadata."""
    await context.abort(grpc_status(exc.error), str(exc), trailing_metadata(exc.error, exc.detail))
    raise AssertionError("context.abort returns only by raising")


def sent_error(metadata: Iterable[tuple[str, str | bytes]] | None) -> pb.Error | None:
    """The Error a failed call carries in its trailing metadata; None when it carries none (the
    failure was the transport's, or a server that did not answer)."""
    for key, value in metadata or ():
        if key == ERROR_KEY and isinstance(value, bytes):
            return pb.Error.FromString(value)
    return None
