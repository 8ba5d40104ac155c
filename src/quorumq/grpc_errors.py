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

Status = grpc.StatusCode

# The trailing metadata key of a failed call's Error ("-bin": gRPC carries the value as bytes).
ERROR_KEY = "quorumq-error-bin"

GRPC_STATUSES: dict[Error, grpc.StatusCode] = {
    Error.BAD_REQUEST: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_TOPIC: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_CONSUMER_GROUP: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_MESSAGE_TAG: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_MESSAGE_KEY: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_MESSAGE_PROPERTY_KEY: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_MESSAGE_ID: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_FILTER_EXPRESSION: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_INVISIBLE_TIME: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_POLLING_TIME: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_OFFSET: Status.OUT_OF_RANGE,
    Error.INVALID_RECEIPT_HANDLE: Status.INVALID_ARGUMENT,
    Error.UNRECOGNIZED_CLIENT_TYPE: Status.INVALID_ARGUMENT,
    Error.MESSAGE_BODY_EMPTY: Status.INVALID_ARGUMENT,
    Error.MESSAGE_BODY_TOO_LARGE: Status.INVALID_ARGUMENT,
    Error.MESSAGE_PROPERTIES_TOO_LARGE: Status.INVALID_ARGUMENT,
    Error.BATCH_TOO_LARGE: Status.INVALID_ARGUMENT,
    Error.RECORD_CORRUPTED: Status.INVALID_ARGUMENT,
    Error.CONFIG_INVALID: Status.INVALID_ARGUMENT,
    Error.REQUEST_TOO_LARGE: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_MESSAGE_GROUP: Status.INVALID_ARGUMENT,
    Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_RETRY_POLICY: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_RETRY_MAX_TIMES: Status.INVALID_ARGUMENT,
    Error.ILLEGAL_TOPIC_ATTRIBUTE: Status.INVALID_ARGUMENT,
    Error.TOPIC_NOT_FOUND: Status.NOT_FOUND,
    Error.CONSUMER_GROUP_NOT_FOUND: Status.NOT_FOUND,
    Error.BROKER_NOT_FOUND: Status.NOT_FOUND,
    Error.MESSAGE_TYPE_UNSUPPORTED: Status.UNIMPLEMENTED,
    Error.NOT_IMPLEMENTED: Status.UNIMPLEMENTED,
    Error.NO_PERMISSION: Status.PERMISSION_DENIED,
    Error.TOO_MANY_REQUESTS: Status.RESOURCE_EXHAUSTED,
    Error.DISK_FULL: Status.RESOURCE_EXHAUSTED,
    Error.SERVICE_NOT_AVAILABLE: Status.UNAVAILABLE,
    Error.SLAVE_PERSISTENCE_TIMEOUT: Status.DEADLINE_EXCEEDED,
    Error.REPLICATION_FAILED: Status.ABORTED,
    Error.INTERNAL_ERROR: Status.INTERNAL,
    Error.STORE_CORRUPTED: Status.DATA_LOSS,
}


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
