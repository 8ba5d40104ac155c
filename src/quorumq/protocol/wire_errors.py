"""How errors travel: the one table mapping each catalogue entry (errors.py) to the RocketMQ v5
`Code` the official clients understand and to the gRPC status of a failed cluster RPC, the v5 code
of each put status, and the cluster protocol's error convention (cluster.proto): a failed RPC ends
with that gRPC status and a `quorumq.cluster.Error` (the entry's code and a detail) in its trailing
metadata, so a client reads the entry from a number, never from text."""

from collections.abc import Iterable
from typing import NoReturn

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5

from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.put_status import PutStatus
from quorumq.errors import Error, QuorumqError

Code = v5.Code
Status = grpc.StatusCode

# The trailing metadata key of a failed cluster RPC's Error ("-bin": gRPC carries the value as bytes).
ERROR_KEY = "quorumq-error-bin"

# Several entries share a v5 code where RocketMQ has no closer one; the catalogue code tells them apart.
WIRE: dict[Error, tuple[int, grpc.StatusCode]] = {
    Error.BAD_REQUEST: (Code.BAD_REQUEST, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_TOPIC: (Code.ILLEGAL_TOPIC, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_CONSUMER_GROUP: (Code.ILLEGAL_CONSUMER_GROUP, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_MESSAGE_TAG: (Code.ILLEGAL_MESSAGE_TAG, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_MESSAGE_KEY: (Code.ILLEGAL_MESSAGE_KEY, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_MESSAGE_PROPERTY_KEY: (Code.ILLEGAL_MESSAGE_PROPERTY_KEY, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_MESSAGE_ID: (Code.ILLEGAL_MESSAGE_ID, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_FILTER_EXPRESSION: (Code.ILLEGAL_FILTER_EXPRESSION, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_INVISIBLE_TIME: (Code.ILLEGAL_INVISIBLE_TIME, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_POLLING_TIME: (Code.ILLEGAL_POLLING_TIME, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_OFFSET: (Code.ILLEGAL_OFFSET, Status.OUT_OF_RANGE),
    Error.INVALID_RECEIPT_HANDLE: (Code.INVALID_RECEIPT_HANDLE, Status.INVALID_ARGUMENT),
    Error.UNRECOGNIZED_CLIENT_TYPE: (Code.UNRECOGNIZED_CLIENT_TYPE, Status.INVALID_ARGUMENT),
    Error.MESSAGE_BODY_EMPTY: (Code.MESSAGE_BODY_EMPTY, Status.INVALID_ARGUMENT),
    Error.MESSAGE_BODY_TOO_LARGE: (Code.MESSAGE_BODY_TOO_LARGE, Status.INVALID_ARGUMENT),
    Error.MESSAGE_PROPERTIES_TOO_LARGE: (Code.MESSAGE_PROPERTIES_TOO_LARGE, Status.INVALID_ARGUMENT),
    Error.BATCH_TOO_LARGE: (Code.PAYLOAD_TOO_LARGE, Status.INVALID_ARGUMENT),
    Error.RECORD_CORRUPTED: (Code.MESSAGE_CORRUPTED, Status.INVALID_ARGUMENT),
    Error.CONFIG_INVALID: (Code.BAD_REQUEST, Status.INVALID_ARGUMENT),
    Error.REQUEST_TOO_LARGE: (Code.PAYLOAD_TOO_LARGE, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_MESSAGE_GROUP: (Code.ILLEGAL_MESSAGE_GROUP, Status.INVALID_ARGUMENT),
    Error.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: (Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_RETRY_POLICY: (Code.BAD_REQUEST, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_RETRY_MAX_TIMES: (Code.BAD_REQUEST, Status.INVALID_ARGUMENT),
    Error.ILLEGAL_TOPIC_ATTRIBUTE: (Code.BAD_REQUEST, Status.INVALID_ARGUMENT),
    Error.TOPIC_NOT_FOUND: (Code.TOPIC_NOT_FOUND, Status.NOT_FOUND),
    Error.CONSUMER_GROUP_NOT_FOUND: (Code.CONSUMER_GROUP_NOT_FOUND, Status.NOT_FOUND),
    Error.BROKER_NOT_FOUND: (Code.NOT_FOUND, Status.NOT_FOUND),
    Error.MESSAGE_TYPE_UNSUPPORTED: (Code.UNSUPPORTED, Status.UNIMPLEMENTED),
    Error.NOT_IMPLEMENTED: (Code.NOT_IMPLEMENTED, Status.UNIMPLEMENTED),
    Error.NO_PERMISSION: (Code.FORBIDDEN, Status.PERMISSION_DENIED),
    Error.TOO_MANY_REQUESTS: (Code.TOO_MANY_REQUESTS, Status.RESOURCE_EXHAUSTED),
    Error.DISK_FULL: (Code.INTERNAL_SERVER_ERROR, Status.RESOURCE_EXHAUSTED),
    Error.SERVICE_NOT_AVAILABLE: (Code.HA_NOT_AVAILABLE, Status.UNAVAILABLE),
    Error.SLAVE_PERSISTENCE_TIMEOUT: (Code.SLAVE_PERSISTENCE_TIMEOUT, Status.DEADLINE_EXCEEDED),
    Error.REPLICATION_FAILED: (Code.INTERNAL_SERVER_ERROR, Status.ABORTED),
    Error.INTERNAL_ERROR: (Code.INTERNAL_ERROR, Status.INTERNAL),
    Error.STORE_CORRUPTED: (Code.INTERNAL_ERROR, Status.DATA_LOSS),
}

PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: Code.HA_NOT_AVAILABLE,
}


def v5_code(error: Error) -> int:
    return WIRE[error][0]


def grpc_status(error: Error) -> grpc.StatusCode:
    return WIRE[error][1]


def trailing_metadata(error: Error, detail: str) -> tuple[tuple[str, bytes], ...]:
    return ((ERROR_KEY, pb.Error(code=error.code, detail=detail).SerializeToString()),)


async def abort(context: grpc.aio.ServicerContext, exc: QuorumqError) -> NoReturn:
    """End a cluster RPC with the error's gRPC status and its Error in the trailing metadata."""
    await context.abort(grpc_status(exc.error), str(exc), trailing_metadata(exc.error, exc.detail))
    raise AssertionError("context.abort returns only by raising")


def sent_error(metadata: Iterable[tuple[str, str | bytes]] | None) -> pb.Error | None:
    """The Error a failed cluster RPC carries in its trailing metadata; None when it carries none
    (the failure was the transport's, or a server that did not answer)."""
    for key, value in metadata or ():
        if key == ERROR_KEY and isinstance(value, bytes):
            return pb.Error.FromString(value)
    return None
