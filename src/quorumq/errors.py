"""The error catalogue: every error a client or operator can see, with a stable name and code.

Each entry maps once to the RocketMQ v5 `Code` the official client understands and to a gRPC
status for quorumq's own cluster protocol. Names and codes are published: never change one,
only add.
"""

import errno
from dataclasses import dataclass
from enum import Enum

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5

Code = v5.Code


@dataclass(frozen=True, eq=False)  # identity, so entries sharing codes stay distinct Enum members
class ErrorKind:
    code: int  # the v5 Code sent to RocketMQ clients
    grpc_status: grpc.StatusCode  # the status on quorumq's cluster protocol
    retriable: bool


class Error(Enum):
    BAD_REQUEST = ErrorKind(Code.BAD_REQUEST, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_TOPIC = ErrorKind(Code.ILLEGAL_TOPIC, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_CONSUMER_GROUP = ErrorKind(Code.ILLEGAL_CONSUMER_GROUP, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_MESSAGE_TAG = ErrorKind(Code.ILLEGAL_MESSAGE_TAG, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_MESSAGE_KEY = ErrorKind(Code.ILLEGAL_MESSAGE_KEY, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_MESSAGE_PROPERTY_KEY = ErrorKind(
        Code.ILLEGAL_MESSAGE_PROPERTY_KEY, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_MESSAGE_ID = ErrorKind(Code.ILLEGAL_MESSAGE_ID, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_FILTER_EXPRESSION = ErrorKind(Code.ILLEGAL_FILTER_EXPRESSION, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_INVISIBLE_TIME = ErrorKind(Code.ILLEGAL_INVISIBLE_TIME, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_POLLING_TIME = ErrorKind(Code.ILLEGAL_POLLING_TIME, grpc.StatusCode.INVALID_ARGUMENT, False)
    ILLEGAL_OFFSET = ErrorKind(Code.ILLEGAL_OFFSET, grpc.StatusCode.OUT_OF_RANGE, False)
    INVALID_RECEIPT_HANDLE = ErrorKind(Code.INVALID_RECEIPT_HANDLE, grpc.StatusCode.INVALID_ARGUMENT, False)
    UNRECOGNIZED_CLIENT_TYPE = ErrorKind(Code.UNRECOGNIZED_CLIENT_TYPE, grpc.StatusCode.INVALID_ARGUMENT, False)
    MESSAGE_BODY_EMPTY = ErrorKind(Code.MESSAGE_BODY_EMPTY, grpc.StatusCode.INVALID_ARGUMENT, False)
    MESSAGE_BODY_TOO_LARGE = ErrorKind(Code.MESSAGE_BODY_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT, False)
    MESSAGE_PROPERTIES_TOO_LARGE = ErrorKind(
        Code.MESSAGE_PROPERTIES_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT, False)
    BATCH_TOO_LARGE = ErrorKind(Code.PAYLOAD_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT, False)
    # A record a producer encoded itself (MessageWriter.SendBatch) that fails its framing or CRC.
    RECORD_CORRUPTED = ErrorKind(Code.MESSAGE_CORRUPTED, grpc.StatusCode.INVALID_ARGUMENT, False)
    TOPIC_NOT_FOUND = ErrorKind(Code.TOPIC_NOT_FOUND, grpc.StatusCode.NOT_FOUND, False)
    CONSUMER_GROUP_NOT_FOUND = ErrorKind(Code.CONSUMER_GROUP_NOT_FOUND, grpc.StatusCode.NOT_FOUND, False)
    BROKER_NOT_FOUND = ErrorKind(Code.NOT_FOUND, grpc.StatusCode.NOT_FOUND, False)
    MESSAGE_TYPE_UNSUPPORTED = ErrorKind(Code.UNSUPPORTED, grpc.StatusCode.UNIMPLEMENTED, False)
    NOT_IMPLEMENTED = ErrorKind(Code.NOT_IMPLEMENTED, grpc.StatusCode.UNIMPLEMENTED, False)
    NO_PERMISSION = ErrorKind(Code.FORBIDDEN, grpc.StatusCode.PERMISSION_DENIED, False)
    TOO_MANY_REQUESTS = ErrorKind(Code.TOO_MANY_REQUESTS, grpc.StatusCode.RESOURCE_EXHAUSTED, True)
    DISK_FULL = ErrorKind(Code.INTERNAL_SERVER_ERROR, grpc.StatusCode.RESOURCE_EXHAUSTED, True)
    STORE_CORRUPTED = ErrorKind(Code.INTERNAL_ERROR, grpc.StatusCode.DATA_LOSS, False)
    CONFIG_INVALID = ErrorKind(Code.BAD_REQUEST, grpc.StatusCode.INVALID_ARGUMENT, False)
    INTERNAL_ERROR = ErrorKind(Code.INTERNAL_ERROR, grpc.StatusCode.INTERNAL, True)
    # RocketMQ's SERVICE_NOT_AVAILABLE: a slave refuses writes (its master takes them).
    SERVICE_NOT_AVAILABLE = ErrorKind(Code.HA_NOT_AVAILABLE, grpc.StatusCode.UNAVAILABLE, True)
    # A commit the master took but not every member of the SyncStateSet confirmed in slaveTimeout.
    SLAVE_PERSISTENCE_TIMEOUT = ErrorKind(Code.SLAVE_PERSISTENCE_TIMEOUT, grpc.StatusCode.DEADLINE_EXCEEDED, True)
    # The replicator's sink could not store records on the destination and its policy is to fail.
    REPLICATION_FAILED = ErrorKind(Code.INTERNAL_SERVER_ERROR, grpc.StatusCode.ABORTED, True)

    @property
    def code(self) -> int:
        return self.value.code


class QuorumqError(Exception):
    """An error with a catalogue entry; `str()` is what the client is shown."""

    def __init__(self, error: Error, detail: str) -> None:
        super().__init__(f"{error.name}: {detail}")
        self.error = error
        self.detail = detail


def write_error(exc: OSError, what: str) -> QuorumqError:
    """A failed write of `what`: DISK_FULL when the disk is full, else INTERNAL_ERROR."""
    return QuorumqError(Error.DISK_FULL if exc.errno == errno.ENOSPC else Error.INTERNAL_ERROR, f"{what}: {exc}")
