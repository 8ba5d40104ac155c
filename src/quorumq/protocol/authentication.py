"""Authentication on the v5 MessagingService, one check for every process that serves it (a broker,
forwarding in controller mode or not, and the name server), as RocketMQ 5.3's proxy checks each gRPC
call before its handler runs.

With authenticationEnabled the server runs this interceptor after its connection limits and before a
request is parsed: each call's `authorization` header is decided by core/auth.py. A refused unary
call or server stream is answered with the method's own response carrying UNAUTHENTICATED (v5
40100); a Telemetry stream is checked once, as it opens (the client signs it once), and a refused
one gets one command with that status and ends. Nothing behind the interceptor runs for a refused
call, so nothing is stored or changed.

The cluster protocol (cluster.proto) on the broker's, the name server's and the controllers' ports
is checked too, with quorumq's own scheme (core/cluster_auth.py): each call signed over its method,
time, nonce and request bytes, refused with UNAUTHENTICATED as a failed call."""

import logging

import grpc
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.core import cluster_auth
from quorumq.core.auth import SIGNED_HEADER, User, authenticate
from quorumq.errors import QuorumqError
from quorumq.grpc_errors import abort
from quorumq.listen import HandlerWrapper, guarded
from quorumq.protocol.v5 import error_status

log = logging.getLogger("quorumq.authentication")

_SERVICE = v5s.DESCRIPTOR.services_by_name["MessagingService"]
# Full method name -> the method, whose response type carries a refusal in its status.
_METHODS = {f"/{_SERVICE.full_name}/{method.name}": method for method in _SERVICE.methods}


class V5Authentication(HandlerWrapper):
    """Each v5 method's handler with the check made in each of its calls."""

    def __init__(self, users: dict[str, User], window_ms: int, clock: Clock) -> None:
        super().__init__()
        self._users = users
        self._window_ms = window_ms
        self._clock = clock

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler | None:
        return self._checked(handler, _METHODS[method]) if method in _METHODS else None

    def refusal(self, context: grpc.aio.ServicerContext, method) -> object | None:
        """The method's answer refusing this call, or None when it is signed by a known, enabled user."""
        headers = {key: value for key, value in context.invocation_metadata() or ()
                   if key in ("authorization", SIGNED_HEADER)}
        try:
            authenticate(headers.get("authorization"), headers.get(SIGNED_HEADER), self._users,
                         self._clock.now_ms(), self._window_ms)
        except QuorumqError as refused:
            log.warning("%s from %s refused: %s", method.name, context.peer(), refused)
            return getattr(v5s, method.output_type.name)(status=error_status(refused))
        return None

    def _checked(self, handler: grpc.RpcMethodHandler, method) -> grpc.RpcMethodHandler:
        async def check(request, context: grpc.aio.ServicerContext) -> object | None:
            return self.refusal(context, method)
        return guarded(handler, check)


class ClusterAuthentication(HandlerWrapper):
    """Each cluster-protocol method's handler with its signature checked in each call
    (core/cluster_auth.py), on the request's exact bytes: this runs before the request is parsed
    (listen.MalformedRequests). A refused call fails with UNAUTHENTICATED (catalogue 304, in the
    trailing metadata as every cluster error, grpc_errors.py) and nothing behind it runs."""

    def __init__(self, users: dict[str, User], clock: Clock) -> None:
        super().__init__()
        self._users = users
        self._clock = clock
        self._nonces = cluster_auth.Nonces(limits.CLUSTER_SIGNATURE_WINDOW_MS, limits.CLUSTER_SIGNATURE_NONCES_MAX)

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler | None:
        if not method.startswith(cluster_auth.METHOD_PREFIX):
            return None
        streaming = handler.request_streaming

        async def check(request, context: grpc.aio.ServicerContext) -> None:
            metadata = {key: value for key, value in context.invocation_metadata() or ()
                        if key in cluster_auth.HEADERS}
            body = b"" if streaming else request  # a stream of requests is signed once, as it opens
            assert isinstance(body, bytes), "MalformedRequests, after this, parses the request"
            try:
                cluster_auth.authenticate(metadata, method, body, self._users,
                                          self._clock.now_ms(), limits.CLUSTER_SIGNATURE_WINDOW_MS, self._nonces)
            except QuorumqError as refused:
                log.warning("%s from %s refused: %s", method, context.peer(), refused)
                await abort(context, refused)
        return guarded(handler, check)


def authentication(config: Config, clock: Clock) -> list[grpc.aio.ServerInterceptor]:
    """The checks a server runs on every call of its v5 and cluster services; none when
    authentication is off."""
    if not config["authenticationEnabled"]:
        return []
    users = config.users()
    return [V5Authentication(users, config["authenticationDateTimeWindowMillis"], clock),
            ClusterAuthentication(users, clock)]
