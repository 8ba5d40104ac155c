"""Authentication on the v5 MessagingService, one check for every process that serves it (a broker,
forwarding in controller mode or not, and the name server), as RocketMQ 5.3's proxy checks each gRPC
call before its handler runs.

With authenticationEnabled the server runs this interceptor after its connection limits and before a
request is parsed: each call's `authorization` header is decided by core/auth.py. A refused unary
call or server stream is answered with the method's own response carrying UNAUTHENTICATED (v5
40100); a Telemetry stream is checked once, as it opens (the client signs it once), and a refused
one gets one command with that status and ends. Nothing behind the interceptor runs for a refused
call, so nothing is stored or changed. quorumq's cluster protocol on the same port is not checked
yet (docs/security.md)."""

import inspect
import logging
from collections.abc import Callable

import grpc
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.core.auth import SIGNED_HEADER, User, authenticate
from quorumq.errors import QuorumqError
from quorumq.listen import HandlerWrapper
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
        kind = next(kind for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
                    if getattr(handler, kind) is not None)
        behavior: Callable = getattr(handler, kind)
        if inspect.isasyncgenfunction(behavior):  # a server stream, Telemetry's included: checked as it opens
            async def answers(request, context):
                refused = self.refusal(context, method)
                if refused is not None:
                    yield refused
                    return
                async for response in behavior(request, context):
                    yield response
            return handler._replace(**{kind: answers})

        async def answer(request, context):
            refused = self.refusal(context, method)
            if refused is not None:
                return refused
            result = behavior(request, context)
            return await result if inspect.isawaitable(result) else result
        return handler._replace(**{kind: answer})


def v5_authentication(config: Config, clock: Clock) -> V5Authentication | None:
    """The interceptor a server with a v5 service runs, or None when authentication is off."""
    if not config["authenticationEnabled"]:
        return None
    return V5Authentication(config.users(), config["authenticationDateTimeWindowMillis"], clock)
