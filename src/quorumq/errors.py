"""The error catalogue: every error a client or operator can see, with a stable name and number.

Each entry's `code` is its own number on quorumq's cluster protocol (cluster.proto `Error`), and the
name is what clients and logs show. Both are published: a name or code never changes and is never
reused; new entries only get added, with a new code. The catalogue is pure data, so core/ may raise
its errors; how each entry travels on the wire is two tables: its RocketMQ v5 `Code` in
protocol/wire_errors.py, its gRPC status in grpc_errors.py.

Codes by range: 1xx the request breaks a rule, 2xx something named does not exist, 3xx the request
is refused as such, 4xx the broker cannot take it now (retriable), 5xx the server failed.
"""

import errno
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class ErrorKind:
    code: int  # the entry's number on the cluster protocol
    retriable: bool


class Error(Enum):
    BAD_REQUEST = ErrorKind(100, False)
    ILLEGAL_TOPIC = ErrorKind(101, False)
    ILLEGAL_CONSUMER_GROUP = ErrorKind(102, False)
    ILLEGAL_MESSAGE_TAG = ErrorKind(103, False)
    ILLEGAL_MESSAGE_KEY = ErrorKind(104, False)
    ILLEGAL_MESSAGE_PROPERTY_KEY = ErrorKind(105, False)
    ILLEGAL_MESSAGE_ID = ErrorKind(106, False)
    ILLEGAL_FILTER_EXPRESSION = ErrorKind(107, False)
    ILLEGAL_INVISIBLE_TIME = ErrorKind(108, False)
    ILLEGAL_POLLING_TIME = ErrorKind(109, False)
    ILLEGAL_OFFSET = ErrorKind(110, False)
    INVALID_RECEIPT_HANDLE = ErrorKind(111, False)
    UNRECOGNIZED_CLIENT_TYPE = ErrorKind(112, False)
    MESSAGE_BODY_EMPTY = ErrorKind(113, False)
    MESSAGE_BODY_TOO_LARGE = ErrorKind(114, False)
    MESSAGE_PROPERTIES_TOO_LARGE = ErrorKind(115, False)
    BATCH_TOO_LARGE = ErrorKind(116, False)
    # A record a producer encoded itself (MessageWriter.SendBatch) that fails its framing or CRC.
    RECORD_CORRUPTED = ErrorKind(117, False)
    CONFIG_INVALID = ErrorKind(118, False)
    # A request larger than its method takes, in bytes or fields (limits.py REQUEST_BYTES_MAX,
    # MESSAGE_FIELDS_MAX): refused before it is parsed.
    REQUEST_TOO_LARGE = ErrorKind(119, False)
    # A FIFO message's group: blank, with control characters or longer than MESSAGE_GROUP_LENGTH_MAX.
    ILLEGAL_MESSAGE_GROUP = ErrorKind(120, False)
    # A message whose type (from its properties) the topic's message.type does not take.
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = ErrorKind(121, False)
    # A subscription group's retry policy that is not JSON, names an unknown type or breaks a bound.
    ILLEGAL_RETRY_POLICY = ErrorKind(122, False)
    # A subscription group's retryMaxTimes outside 0..RETRY_MAX_TIMES_MAX.
    ILLEGAL_RETRY_MAX_TIMES = ErrorKind(123, False)
    # A topic attribute (updateTopic -a) that is unknown, malformed or has an unknown value.
    ILLEGAL_TOPIC_ATTRIBUTE = ErrorKind(124, False)
    TOPIC_NOT_FOUND = ErrorKind(200, False)
    CONSUMER_GROUP_NOT_FOUND = ErrorKind(201, False)
    BROKER_NOT_FOUND = ErrorKind(202, False)
    MESSAGE_TYPE_UNSUPPORTED = ErrorKind(300, False)
    NOT_IMPLEMENTED = ErrorKind(301, False)
    NO_PERMISSION = ErrorKind(302, False)
    TOO_MANY_REQUESTS = ErrorKind(400, True)
    DISK_FULL = ErrorKind(401, True)
    # RocketMQ's SERVICE_NOT_AVAILABLE: a slave refuses writes (its master takes them).
    SERVICE_NOT_AVAILABLE = ErrorKind(402, True)
    # A commit the master took but not every member of the SyncStateSet confirmed in slaveTimeout.
    SLAVE_PERSISTENCE_TIMEOUT = ErrorKind(403, True)
    # The replicator's sink could not store records on the destination and its policy is to fail.
    REPLICATION_FAILED = ErrorKind(404, True)
    INTERNAL_ERROR = ErrorKind(500, True)
    STORE_CORRUPTED = ErrorKind(501, False)

    @property
    def code(self) -> int:
        return self.value.code

    @property
    def retriable(self) -> bool:
        return self.value.retriable

    @classmethod
    def from_code(cls, code: int) -> "Error | None":
        """The entry with this code; None for a code this version does not know (a newer server's)."""
        return _BY_CODE.get(code)


_BY_CODE = {error.code: error for error in Error}


class QuorumqError(Exception):
    """An error with a catalogue entry; `str()` is what the client is shown."""

    def __init__(self, error: Error, detail: str) -> None:
        super().__init__(f"{error.name}: {detail}")
        self.error = error
        self.detail = detail


def write_error(exc: OSError, what: str) -> QuorumqError:
    """A failed write of `what`: DISK_FULL when the disk is full, else INTERNAL_ERROR."""
    return QuorumqError(Error.DISK_FULL if exc.errno == errno.ENOSPC else Error.INTERNAL_ERROR, f"{what}: {exc}")
