"""The error catalogue as data: each entry's own published code, its gRPC status and v5 code, and a
client reading the entry from the code a failed cluster RPC carries, never from text."""

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5

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
    "ILLEGAL_RETRY_MAX_TIMES": 123, "ILLEGAL_TOPIC_ATTRIBUTE": 124,
    "TOPIC_NOT_FOUND": 200,
    "CONSUMER_GROUP_NOT_FOUND": 201, "BROKER_NOT_FOUND": 202, "MESSAGE_TYPE_UNSUPPORTED": 300,
    "NOT_IMPLEMENTED": 301, "NO_PERMISSION": 302, "TOO_MANY_REQUESTS": 400, "DISK_FULL": 401,
    "SERVICE_NOT_AVAILABLE": 402, "SLAVE_PERSISTENCE_TIMEOUT": 403, "REPLICATION_FAILED": 404,
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


def test_every_entry_names_its_grpc_status_and_v5_code_and_each_is_mapped_once():
    for error in Error:
        assert error.value.grpc_status in grpc.StatusCode.__members__, error
        assert error.value.v5_code in v5.Code.keys(), error
        assert GRPC_STATUSES[error] is grpc.StatusCode[error.value.grpc_status]
        assert V5_CODES[error] == v5.Code.Value(error.value.v5_code)
    assert set(V5_CODES) == set(GRPC_STATUSES) == set(Error)
    assert set(PUT_STATUS_CODES) == set(PutStatus)


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
