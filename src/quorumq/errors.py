"""The error catalogue: every error a client or operator can see, with a stable name and number.

Each entry's `code` is its own number on quorumq's cluster protocol (cluster.proto `Error`), and the
name is what clients and logs show. Both are published: a name or code never changes and is never
reused; new entries only get added, with a new code. The catalogue is pure data, so core/ may raise
its errors; each entry also names how it travels on the wire, its gRPC status and its RocketMQ v5
`Code`, which grpc_errors.py and protocol/wire_errors.py map once for every entry.

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
    # How the entry travels, by name (this module imports neither grpc nor the v5 protocol): the
    # grpc.StatusCode a failed call ends with (grpc_errors.py), the v5 Code a v5 answer carries
    # (protocol/wire_errors.py); several entries share a v5 code where RocketMQ has no closer one,
    # the catalogue code tells them apart.
    grpc_status: str
    v5_code: str


class Error(Enum):
    BAD_REQUEST = ErrorKind(100, False, "INVALID_ARGUMENT", "BAD_REQUEST")
    ILLEGAL_TOPIC = ErrorKind(101, False, "INVALID_ARGUMENT", "ILLEGAL_TOPIC")
    ILLEGAL_CONSUMER_GROUP = ErrorKind(102, False, "INVALID_ARGUMENT", "ILLEGAL_CONSUMER_GROUP")
    ILLEGAL_MESSAGE_TAG = ErrorKind(103, False, "INVALID_ARGUMENT", "ILLEGAL_MESSAGE_TAG")
    ILLEGAL_MESSAGE_KEY = ErrorKind(104, False, "INVALID_ARGUMENT", "ILLEGAL_MESSAGE_KEY")
    ILLEGAL_MESSAGE_PROPERTY_KEY = ErrorKind(105, False, "INVALID_ARGUMENT", "ILLEGAL_MESSAGE_PROPERTY_KEY")
    ILLEGAL_MESSAGE_ID = ErrorKind(106, False, "INVALID_ARGUMENT", "ILLEGAL_MESSAGE_ID")
    ILLEGAL_FILTER_EXPRESSION = ErrorKind(107, False, "INVALID_ARGUMENT", "ILLEGAL_FILTER_EXPRESSION")
    ILLEGAL_INVISIBLE_TIME = ErrorKind(108, False, "INVALID_ARGUMENT", "ILLEGAL_INVISIBLE_TIME")
    ILLEGAL_POLLING_TIME = ErrorKind(109, False, "INVALID_ARGUMENT", "ILLEGAL_POLLING_TIME")
    ILLEGAL_OFFSET = ErrorKind(110, False, "OUT_OF_RANGE", "ILLEGAL_OFFSET")
    INVALID_RECEIPT_HANDLE = ErrorKind(111, False, "INVALID_ARGUMENT", "INVALID_RECEIPT_HANDLE")
    UNRECOGNIZED_CLIENT_TYPE = ErrorKind(112, False, "INVALID_ARGUMENT", "UNRECOGNIZED_CLIENT_TYPE")
    MESSAGE_BODY_EMPTY = ErrorKind(113, False, "INVALID_ARGUMENT", "MESSAGE_BODY_EMPTY")
    MESSAGE_BODY_TOO_LARGE = ErrorKind(114, False, "INVALID_ARGUMENT", "MESSAGE_BODY_TOO_LARGE")
    MESSAGE_PROPERTIES_TOO_LARGE = ErrorKind(115, False, "INVALID_ARGUMENT", "MESSAGE_PROPERTIES_TOO_LARGE")
    BATCH_TOO_LARGE = ErrorKind(116, False, "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")
    # A record a producer encoded itself (MessageWriter.SendBatch) that fails its framing or CRC.
    RECORD_CORRUPTED = ErrorKind(117, False, "INVALID_ARGUMENT", "MESSAGE_CORRUPTED")
    CONFIG_INVALID = ErrorKind(118, False, "INVALID_ARGUMENT", "BAD_REQUEST")
    # A request larger than its method takes, in bytes or fields (limits.py REQUEST_BYTES_MAX,
    # MESSAGE_FIELDS_MAX): refused before it is parsed.
    REQUEST_TOO_LARGE = ErrorKind(119, False, "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")
    # A FIFO message's group: blank, with control characters or longer than MESSAGE_GROUP_LENGTH_MAX.
    ILLEGAL_MESSAGE_GROUP = ErrorKind(120, False, "INVALID_ARGUMENT", "ILLEGAL_MESSAGE_GROUP")
    # A message whose type (from its properties) the topic's message.type does not take.
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = ErrorKind(121, False, "INVALID_ARGUMENT",
                                                    "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE")
    # A subscription group's retry policy that is not JSON, names an unknown type or breaks a bound.
    ILLEGAL_RETRY_POLICY = ErrorKind(122, False, "INVALID_ARGUMENT", "BAD_REQUEST")
    # A subscription group's retryMaxTimes outside 0..RETRY_MAX_TIMES_MAX.
    ILLEGAL_RETRY_MAX_TIMES = ErrorKind(123, False, "INVALID_ARGUMENT", "BAD_REQUEST")
    # A topic attribute (updateTopic -a) that is unknown, malformed or has an unknown value.
    ILLEGAL_TOPIC_ATTRIBUTE = ErrorKind(124, False, "INVALID_ARGUMENT", "BAD_REQUEST")
    ILLEGAL_DELIVERY_TIME = ErrorKind(125, False, "INVALID_ARGUMENT", "ILLEGAL_DELIVERY_TIME")
    INVALID_TRANSACTION_ID = ErrorKind(126, False, "INVALID_ARGUMENT", "INVALID_TRANSACTION_ID")
    INVALID_RECALL_HANDLE = ErrorKind(127, False, "INVALID_ARGUMENT", "BAD_REQUEST")
    TOPIC_NOT_FOUND = ErrorKind(200, False, "NOT_FOUND", "TOPIC_NOT_FOUND")
    CONSUMER_GROUP_NOT_FOUND = ErrorKind(201, False, "NOT_FOUND", "CONSUMER_GROUP_NOT_FOUND")
    BROKER_NOT_FOUND = ErrorKind(202, False, "NOT_FOUND", "NOT_FOUND")
    # A recall of a delay message already delivered or recalled.
    TIMER_NOT_PENDING = ErrorKind(203, False, "NOT_FOUND", "NOT_FOUND")
    MESSAGE_TYPE_UNSUPPORTED = ErrorKind(300, False, "UNIMPLEMENTED", "UNSUPPORTED")
    NOT_IMPLEMENTED = ErrorKind(301, False, "UNIMPLEMENTED", "NOT_IMPLEMENTED")
    NO_PERMISSION = ErrorKind(302, False, "PERMISSION_DENIED", "FORBIDDEN")
    # EndTransaction of a transaction already committed, rolled back or given up.
    TRANSACTION_ALREADY_ENDED = ErrorKind(303, False, "FAILED_PRECONDITION", "INVALID_TRANSACTION_ID")
    # With authenticationEnabled: a v5 request without a valid signature of a known, enabled user
    # (core/auth.py); RocketMQ answers its AuthenticationException with the v5 UNAUTHORIZED.
    UNAUTHENTICATED = ErrorKind(304, False, "UNAUTHENTICATED", "UNAUTHORIZED")
    TOO_MANY_REQUESTS = ErrorKind(400, True, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS")
    DISK_FULL = ErrorKind(401, True, "RESOURCE_EXHAUSTED", "INTERNAL_SERVER_ERROR")
    # RocketMQ's SERVICE_NOT_AVAILABLE: a slave refuses writes (its master takes them).
    SERVICE_NOT_AVAILABLE = ErrorKind(402, True, "UNAVAILABLE", "HA_NOT_AVAILABLE")
    # A commit the master took but not every member of the SyncStateSet confirmed in slaveTimeout.
    SLAVE_PERSISTENCE_TIMEOUT = ErrorKind(403, True, "DEADLINE_EXCEEDED", "SLAVE_PERSISTENCE_TIMEOUT")
    # The replicator's sink could not store records on the destination and its policy is to fail.
    REPLICATION_FAILED = ErrorKind(404, True, "ABORTED", "INTERNAL_SERVER_ERROR")
    # A proxy reached no replica of the broker group that owns a queue (proxy/service.py).
    BROKER_UNREACHABLE = ErrorKind(405, True, "UNAVAILABLE", "PROXY_TIMEOUT")
    INTERNAL_ERROR = ErrorKind(500, True, "INTERNAL", "INTERNAL_ERROR")
    STORE_CORRUPTED = ErrorKind(501, False, "DATA_LOSS", "INTERNAL_ERROR")

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
