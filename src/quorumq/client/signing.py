"""The signing of quorumq's own cluster-protocol calls (core/cluster_auth.py) on a channel: one
interceptor covers every call made on it, whatever stub makes it.

The signature covers the digest of the request's bytes, and the server hashes exactly the bytes
it receives. Here the request is still an object: it is hashed as `SerializeToString()` writes it,
the function the stub's serializer calls on the same object right after, which writes an unchanged
message the same way each time in one process (map entries included). Should the two ever differ,
the call is refused, never wrongly accepted. v5 calls on the same channel carry their own header
(routes.Channels) and pass through unsigned here. A batch is signed over the bytes it is sent as,
without an interceptor (routes.Channels.send_batch)."""

import secrets
import time
from typing import Any

import grpc

from quorumq.core import cluster_auth
from quorumq.core.auth import Credentials


def signature(credentials: Credentials, method: str, body: bytes) -> tuple[tuple[str, str], ...]:
    """The metadata that signs a call of `method` made now, whose request serializes to `body`."""
    return cluster_auth.sign(credentials, method, body, time.time_ns() // 1_000_000,
                             secrets.token_hex(cluster_auth.NONCE_BYTES))


class _Signing:
    """Signs each cluster-protocol call with `credentials`, the current UTC time and a fresh nonce."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def _signed(self, details: grpc.aio.ClientCallDetails, request: Any) -> grpc.aio.ClientCallDetails:
        """`request`: the message, hashed as serialized, or None for a stream (signed over no bytes)."""
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if not method.startswith(cluster_auth.METHOD_PREFIX):
            return details
        body = request.SerializeToString() if request is not None else b""
        signed = signature(self._credentials, method, body)
        return details._replace(metadata=grpc.aio.Metadata(*(details.metadata or ()), *signed))


class _UnarySigning(_Signing, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request) -> Any:
        return await continuation(self._signed(client_call_details, request), request)


class _StreamSigning(_Signing, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator) -> Any:
        return await continuation(self._signed(client_call_details, None), request_iterator)  # signed as it opens


def signers(credentials: Credentials) -> list[grpc.aio.ClientInterceptor]:
    """The interceptors that sign a channel's cluster-protocol calls: one per kind of call that
    cluster.proto has, as grpc.aio files an interceptor under the first kind it is only."""
    return [_UnarySigning(credentials), _StreamSigning(credentials)]
