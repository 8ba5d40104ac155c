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
time, nonce and request bytes, refused with UNAUTHENTICATED as a failed call.

Authorization follows (protocol/permissions.py says what each method needs, core/acl.py decides):
what only cluster members do is refused to any other user whenever authentication is on; with
authorizationEnabled, what changes the cluster needs a Super user, and every other call the actions
it needs on its resources, checked once its request is parsed (AccessRules). A refusal is
NO_PERMISSION (v5 40300, FORBIDDEN), answered as an authentication refusal is."""

import contextvars
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.core import cluster_auth
from quorumq.core.acl import authorize, forbidden
from quorumq.core.auth import SIGNED_HEADER, User, UserType, authenticate
from quorumq.errors import QuorumqError
from quorumq.grpc_errors import abort
from quorumq.listen import HandlerWrapper, guarded
from quorumq.protocol.access import Principals
from quorumq.protocol.permissions import ANYONE, MEMBER, SUPER, USERS, permission, settings_needs
from quorumq.protocol.v5 import error_status

log = logging.getLogger("quorumq.authentication")

_SERVICE = v5s.DESCRIPTOR.services_by_name["MessagingService"]
# Full method name -> the method, whose response type carries a refusal in its status.
_METHODS = {f"/{_SERVICE.full_name}/{method.name}": method for method in _SERVICE.methods}
# The user a call was signed by, from its authentication to its authorization (one gRPC call runs
# in one task, whose context this is).
_CALLER: contextvars.ContextVar[User] = contextvars.ContextVar("caller")
_TELEMETRY = f"/{_SERVICE.full_name}/Telemetry"
# A Telemetry stream's check of each settings command it carries (check_settings), set as the
# stream opens with authorizationEnabled.
_SETTINGS_CHECK: contextvars.ContextVar[Callable[[object], None]] = contextvars.ContextVar("settings_check")


def check_settings(settings) -> None:
    """Raises NO_PERMISSION when this Telemetry stream's user may not use `settings` (a v5
    Settings: the topics it publishes, the group and topics it subscribes); with authorization
    off, nothing."""
    check = _SETTINGS_CHECK.get(None)
    if check is not None:
        check(settings)


def caller_ip(context: grpc.aio.ServicerContext) -> str:
    """The caller's address from gRPC's peer (`ipv4:1.2.3.4:5`, `ipv6:[::1]:5`); "" when it has none."""
    kind, _, rest = (context.peer() or "").partition(":")
    host = rest.rpartition(":")[0].strip("[]") if kind in ("ipv4", "ipv6") else ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return ""


def _v5_refusal(method, refused: QuorumqError) -> object:
    return getattr(v5s, method.output_type.name)(status=error_status(refused))


@dataclass(frozen=True)
class _Checks:
    principals: Callable[[], Principals]
    authorization: bool  # authorizationEnabled

    def by_kind(self, user: User, method: str) -> None:
        """The checks that need no request: a member's call, a Super user's, one for anyone. Raises
        NO_PERMISSION."""
        needed = permission(method)
        if needed == MEMBER:
            if user.username != self.principals().inner_access_key:
                raise forbidden(f"{method} is for cluster members (innerClientAuthenticationCredentials), "
                                f"not user {user.username!r}")
        elif (needed == USERS or self.authorization and needed == SUPER) and user.user_type is not UserType.SUPER:
            raise forbidden(f"{method} needs a Super user, not {user.username!r}")


class V5Authentication(HandlerWrapper):
    """Each v5 method's handler with the check made in each of its calls."""

    def __init__(self, checks: _Checks, window_ms: int, clock: Clock) -> None:
        super().__init__()
        self._checks = checks
        self._window_ms = window_ms
        self._clock = clock

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler | None:
        return self._checked(handler, method) if method in _METHODS else None

    def refusal(self, context: grpc.aio.ServicerContext, method: str) -> object | None:
        """The method's answer refusing this call, or None when it is signed by a known, enabled user."""
        headers = {key: value for key, value in context.invocation_metadata() or ()
                   if key in ("authorization", SIGNED_HEADER)}
        try:
            user = authenticate(headers.get("authorization"), headers.get(SIGNED_HEADER),
                                self._checks.principals().users, self._clock.now_ms(), self._window_ms)
            self._checks.by_kind(user, method)
        except QuorumqError as refused:
            log.warning("%s from %s refused: %s", _METHODS[method].name, context.peer(), refused)
            return _v5_refusal(_METHODS[method], refused)
        _CALLER.set(user)
        return None

    def _checked(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        async def check(request, context: grpc.aio.ServicerContext) -> object | None:
            return self.refusal(context, method)
        return guarded(handler, check)


class ClusterAuthentication(HandlerWrapper):
    """Each cluster-protocol method's handler with its signature checked in each call
    (core/cluster_auth.py), on the request's exact bytes: this runs before the request is parsed
    (listen.MalformedRequests). A refused call fails with UNAUTHENTICATED (catalogue 304, in the
    trailing metadata as every cluster error, grpc_errors.py) and nothing behind it runs."""

    def __init__(self, checks: _Checks, clock: Clock) -> None:
        super().__init__()
        self._checks = checks
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
                user = cluster_auth.authenticate(metadata, method, body, self._checks.principals().users,
                                                 self._clock.now_ms(), limits.CLUSTER_SIGNATURE_WINDOW_MS,
                                                 self._nonces)
                self._checks.by_kind(user, method)
            except QuorumqError as refused:
                log.warning("%s from %s refused: %s", method, context.peer(), refused)
                await abort(context, refused)
            _CALLER.set(user)
        return guarded(handler, check)


class AccessRules(HandlerWrapper):
    """With authorizationEnabled, each call a rule decides (protocol/permissions.py) checked against
    its caller's rules once its request is parsed: a v5 call refused in its method's answer, a
    cluster call failed, both with NO_PERMISSION."""

    def __init__(self, principals: Callable[[], Principals], cluster: str) -> None:
        super().__init__()
        self._principals = principals
        self._cluster = cluster  # what Cluster resources of this server's calls are named

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler | None:
        if method == _TELEMETRY:
            return guarded(handler, self._settings_checked)
        needs = permission(method)
        if needs in (MEMBER, USERS, SUPER, ANYONE):
            return None
        assert callable(needs) and not handler.request_streaming, f"{method}: a stream of requests has no one request"
        v5_method = _METHODS.get(method)

        async def check(request, context: grpc.aio.ServicerContext) -> object | None:
            try:
                authorize(_CALLER.get(), self._principals().rules, needs(request, self._cluster), caller_ip(context))
            except QuorumqError as refused:
                log.warning("%s from %s refused: %s", method, context.peer(), refused)
                if v5_method is not None:
                    return _v5_refusal(v5_method, refused)
                await abort(context, refused)
            return None
        return guarded(handler, check)

    async def _settings_checked(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        """A Telemetry stream opens: its settings commands are checked as they come (check_settings)."""
        user, address, peer = _CALLER.get(), caller_ip(context), context.peer()

        def check(settings) -> None:
            try:
                authorize(user, self._principals().rules, settings_needs(settings), address)
            except QuorumqError as refused:
                log.warning("Telemetry settings from %s refused: %s", peer, refused)
                raise
        _SETTINGS_CHECK.set(check)


@dataclass(frozen=True)
class AccessChecks:
    """A server's interceptors: `authentication` before a request is parsed (a cluster call's
    signature is over its exact bytes), `authorization` after."""

    authentication: list[grpc.aio.ServerInterceptor]
    authorization: list[grpc.aio.ServerInterceptor]


def access_checks(config: Config, clock: Clock, principals: Callable[[], Principals],
                  cluster: str = "") -> AccessChecks:
    """The checks a server runs on every call of its v5 and cluster services, deciding with what
    `principals` gives at the time of the call; none when authentication is off."""
    if not config["authenticationEnabled"]:
        return AccessChecks([], [])
    checks = _Checks(principals, config["authorizationEnabled"])
    return AccessChecks(
        [V5Authentication(checks, config["authenticationDateTimeWindowMillis"], clock),
         ClusterAuthentication(checks, clock)],
        [AccessRules(principals, cluster)] if config["authorizationEnabled"] else [])


def configured_principals(config: Config) -> Principals:
    """The users of a process's config alone (a controller's): every one a Super user."""
    inner = config.inner_credentials()
    return Principals(config.users(), {}, inner.access_key if inner is not None else None)
