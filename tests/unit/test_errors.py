"""The error catalogue as data: each entry's own published code, its gRPC status and v5 code, and a
client reading the entry from the code a failed cluster RPC carries, never from text."""

import grpc

from quorumq.client.errors import ClientError
from quorumq.core.put_status import PutStatus
from quorumq.errors import Error
from quorumq.grpc_errors import ERROR_KEY, GRPC_STATUSES, trailing_metadata
from quorumq.protocol.wire_errors import PUT_STATUS_CODES, V5_CODES

# Published: a code never changes and is never reused, so this list only grows.
PUBLISHED = {
    "BAD_REQUEST": 100, "ILLEGAL_TOPIC": 101, "ILLEGAL_CONSUMER_GROUP": 102, "ILLEGAL_MESSAGE_TAG": 103,
    "ILLEGAL_MESSAGE_KEY": 104, "ILLEGAL_MESSAGE_PROPERTY_KEY": 105, "ILLEGAL_MESSAGE_ID": 106,
    "ILLEGAL_FILTER_EXPRESSION": 107, "ILLEGAL_INVISIBLE_TIME": 108, "ILLEGAL_POLLING_TIME": 109,
    "ILLEGAL_OFFSET": 110, "INVALID_RECEIPT_HANDLE": 111, "UNRECOGNIZED_CLIENT_TYPE": 112,
    "MESSAGE_BODY_EMPTY": 113, "MESSAGE_BODY_TOO_LARGE": 114, "MESSAGE_PROPERTIES_TOO_LARGE": 115,
    "BATCH_TOO_LARGE": 116, "RECORD_CORRUPTED": 117, "CONFIG_INVALID": 118, "REQUEST_TOO_LARGE": 119,
    "ILLEGAL_MESSAGE_GROUP": 120, "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE": 121, "ILLEGAL_RETRY_POLICY": 122,
    "ILLEGAL_RETRY_MAX_TIMES": 123, "ILLEGAL_TOPIC_ATTRIBUTE": 124, "ILLEGAL_DELIVERY_TIME": 125,
    "INVALID_TRANSACTION_ID": 126, "INVALID_RECALL_HANDLE": 127,
    "TOPIC_NOT_FOUND": 200,
    "CONSUMER_GROUP_NOT_FOUND": 201, "BROKER_NOT_FOUND": 202, "TIMER_NOT_PENDING": 203,
    "MESSAGE_TYPE_UNSUPPORTED": 300, "NOT_IMPLEMENTED": 301, "NO_PERMISSION": 302, "TRANSACTION_ALREADY_ENDED": 303,
    "UNAUTHENTICATED": 304,
    "TOO_MANY_REQUESTS": 400, "DISK_FULL": 401,
    "SERVICE_NOT_AVAILABLE": 402, "SLAVE_PERSISTENCE_TIMEOUT": 403, "REPLICATION_FAILED": 404,
    "BROKER_UNREACHABLE": 405,
    "INTERNAL_ERROR": 500, "STORE_CORRUPTED": 501,
}


def test_every_entry_has_a_code_of_its_own():
    codes = [error.code for error in Error]
    assert len(set(codes)) == len(codes)
    assert all(Error.from_code(error.code) is error for error in Error)
    assert Error.from_code(9999) is None


def test_published_codes_never_change():
    current = {error.name: error.code for error in Error}
    assert {name: current.get(name) for name in PUBLISHED} == PUBLISHED


# How each entry and put status travels, as published: a client's handling hangs on these, so a
# change to one fails here. A new entry is added here with its codes.
WIRE = {
    "BAD_REQUEST": ("INVALID_ARGUMENT", 40000), "ILLEGAL_TOPIC": ("INVALID_ARGUMENT", 40002),
    "ILLEGAL_CONSUMER_GROUP": ("INVALID_ARGUMENT", 40003), "ILLEGAL_MESSAGE_TAG": ("INVALID_ARGUMENT", 40004),
    "ILLEGAL_MESSAGE_KEY": ("INVALID_ARGUMENT", 40005), "ILLEGAL_MESSAGE_PROPERTY_KEY": ("INVALID_ARGUMENT", 40007),
    "ILLEGAL_MESSAGE_ID": ("INVALID_ARGUMENT", 40009), "ILLEGAL_FILTER_EXPRESSION": ("INVALID_ARGUMENT", 40010),
    "ILLEGAL_INVISIBLE_TIME": ("INVALID_ARGUMENT", 40011), "ILLEGAL_POLLING_TIME": ("INVALID_ARGUMENT", 40018),
    "ILLEGAL_OFFSET": ("OUT_OF_RANGE", 40019), "INVALID_RECEIPT_HANDLE": ("INVALID_ARGUMENT", 40013),
    "UNRECOGNIZED_CLIENT_TYPE": ("INVALID_ARGUMENT", 40015), "MESSAGE_BODY_EMPTY": ("INVALID_ARGUMENT", 41302),
    "MESSAGE_BODY_TOO_LARGE": ("INVALID_ARGUMENT", 41301), "MESSAGE_PROPERTIES_TOO_LARGE": ("INVALID_ARGUMENT", 43101),
    "BATCH_TOO_LARGE": ("INVALID_ARGUMENT", 41300), "RECORD_CORRUPTED": ("INVALID_ARGUMENT", 40016),
    "CONFIG_INVALID": ("INVALID_ARGUMENT", 40000), "REQUEST_TOO_LARGE": ("INVALID_ARGUMENT", 41300),
    "ILLEGAL_MESSAGE_GROUP": ("INVALID_ARGUMENT", 40006),
    "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE": ("INVALID_ARGUMENT", 40014),
    "ILLEGAL_RETRY_POLICY": ("INVALID_ARGUMENT", 40000), "ILLEGAL_RETRY_MAX_TIMES": ("INVALID_ARGUMENT", 40000),
    "ILLEGAL_TOPIC_ATTRIBUTE": ("INVALID_ARGUMENT", 40000), "ILLEGAL_DELIVERY_TIME": ("INVALID_ARGUMENT", 40012),
    "INVALID_TRANSACTION_ID": ("INVALID_ARGUMENT", 40008), "INVALID_RECALL_HANDLE": ("INVALID_ARGUMENT", 40000),
    "TOPIC_NOT_FOUND": ("NOT_FOUND", 40402), "CONSUMER_GROUP_NOT_FOUND": ("NOT_FOUND", 40403),
    "BROKER_NOT_FOUND": ("NOT_FOUND", 40400), "TIMER_NOT_PENDING": ("NOT_FOUND", 40400),
    "MESSAGE_TYPE_UNSUPPORTED": ("UNIMPLEMENTED", 50500), "NOT_IMPLEMENTED": ("UNIMPLEMENTED", 50100),
    "NO_PERMISSION": ("PERMISSION_DENIED", 40300), "TRANSACTION_ALREADY_ENDED": ("FAILED_PRECONDITION", 40008),
    "UNAUTHENTICATED": ("UNAUTHENTICATED", 40100),
    "TOO_MANY_REQUESTS": ("RESOURCE_EXHAUSTED", 42900), "DISK_FULL": ("RESOURCE_EXHAUSTED", 50001),
    "SERVICE_NOT_AVAILABLE": ("UNAVAILABLE", 50002), "SLAVE_PERSISTENCE_TIMEOUT": ("DEADLINE_EXCEEDED", 50402),
    "REPLICATION_FAILED": ("ABORTED", 50001),
    "BROKER_UNREACHABLE": ("UNAVAILABLE", 50400),
    "INTERNAL_ERROR": ("INTERNAL", 50000), "STORE_CORRUPTED": ("DATA_LOSS", 50000),
}
PUT_STATUS_WIRE = {"PUT_OK": 20000, "FLUSH_DISK_TIMEOUT": 50401, "FLUSH_SLAVE_TIMEOUT": 50402,
                   "SLAVE_NOT_AVAILABLE": 50002, "IN_SYNC_REPLICAS_NOT_ENOUGH": 50002}


def test_the_grpc_status_and_v5_code_of_every_entry_and_put_status_are_as_published():
    assert {error.name: (GRPC_STATUSES[error].name, V5_CODES[error]) for error in Error} == WIRE
    assert {put_status.name: code for put_status, code in PUT_STATUS_CODES.items()} == PUT_STATUS_WIRE
    assert {put_status.name for put_status in PutStatus} == set(PUT_STATUS_WIRE)


class FailedCall(grpc.RpcError):
    """What a stub raises: a status, its details and trailing metadata."""

    def __init__(self, status, details, metadata=()):
        self._status, self._details, self._metadata = status, details, metadata

    def code(self):
        return self._status

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._metadata


def test_a_client_names_the_error_by_the_code_it_carries_not_by_the_text():
    failure = FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_REQUESTS: misleading text",
                         trailing_metadata(Error.DISK_FULL, "no space left on /data"))
    error = ClientError.from_rpc(failure)
    assert (error.error, error.name, error.detail) == (Error.DISK_FULL, "DISK_FULL", "no space left on /data")
    assert error.grpc_status == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_failure_without_an_error_is_named_by_its_grpc_status():
    for metadata in ((), ((ERROR_KEY, b"\x08\x8fN"),)):  # none, or a code newer than this client
        error = ClientError.from_rpc(FailedCall(grpc.StatusCode.UNAVAILABLE, "TOPIC_NOT_FOUND: x", metadata))
        assert (error.error, error.name, error.detail) == (None, "UNAVAILABLE", "TOPIC_NOT_FOUND: x")
        assert error.unreachable
