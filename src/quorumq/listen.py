"""The gRPC servers' listening socket and what gRPC logs about their calls, one rule for the name
server, broker and controller."""

import inspect
import logging
import resource
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from quorumq import limits, tls
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.connection_limits import ConnectionLimits, Peers, channel_options
from quorumq.core.wire_fields import Shape, WireError, count_field
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort

GRPC_CORE_LOGGER = "grpc._cython.cygrpc"
UNDELIVERED_MARK = "ExecuteBatchError raised in core by servicer method"
UNSENT_BATCH = 'Failed "execute_batch"'  # the answer's batch, as opposed to one gRPC refused to start


class UndeliveredResponse(logging.Filter):
    """gRPC logs an answer it could not send, because the call ended on the client's side while
    the handler ran (cancelled, past its deadline, the connection lost in a partition), as an
    ERROR with a traceback from its core. Nothing failed on the server: say so in one line. Other
    batch failures (a call gRPC refused to start) keep their level and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        if message.startswith(UNDELIVERED_MARK) and str(error).startswith(UNSENT_BATCH):
            method = message[len(UNDELIVERED_MARK):].strip(" []")
            record.msg, record.args = ("%s: the call ended on the client's side (cancelled, past its deadline or "
                                       "its connection lost) before the answer was sent", (method,))
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.exc_info = record.exc_text = None
        return True


_UNDELIVERED = UndeliveredResponse()
log = logging.getLogger("quorumq.listen")


@dataclass(frozen=True)
class RequestBound:
    """What one method's request may hold, checked on its bytes before protobuf parses it: its
    size, and the entries of its repeated field, counted by core/wire_fields.py in a walk that
    stops past the bound. A request large enough to hold more than entries_max x entry_fields_max
    fields (each takes 2 bytes at least) has the fields within each entry counted too. `answer`
    builds the method's own answer carrying the refusal (a v5 status); without it the call fails
    with the refusal's error (grpc_errors.py)."""

    bytes_max: int | None = None  # None: gRPC's receive limit alone
    entries_field: int = 0  # the number of the request's top-level repeated field; 0: none
    entries_max: int = 0
    entries_name: str = ""  # what the error calls them
    entries_min: int = 1  # for the error's text
    entries_error: Error = Error.BATCH_TOO_LARGE  # past entries_max: the error of the rule the handler checks
    enter: Shape = field(default_factory=dict)  # what the walk enters of a large request's entries
    entry_fields_max: int = 0  # fields within one entry of a large request
    answer: Callable[[QuorumqError], object] | None = None

    def refusal(self, raw: bytes, method: str) -> QuorumqError | None:
        """Why the request is refused unparsed, or None. Raises WireError when it is no message."""
        name = method.rpartition("/")[2]
        if self.bytes_max is not None and len(raw) > self.bytes_max:
            return QuorumqError(Error.REQUEST_TOO_LARGE, f"{name}: a request takes at most {self.bytes_max} "
                                                         f"bytes; this one has {len(raw)}")
        if not self.entries_field:
            return None
        deep = bool(self.enter) and len(raw) > 2 * self.entries_max * self.entry_fields_max
        fields_max = self.entries_max + limits.REQUEST_OTHER_FIELDS_MAX
        count = count_field(raw, self.entries_field, self.entries_max, fields_max, self.enter if deep else None,
                            self.entry_fields_max)
        if count is None:
            within = f" and {self.entry_fields_max} within each of its {self.entries_name}" if deep else ""
            return QuorumqError(Error.REQUEST_TOO_LARGE, f"{name}: a request holds at most {fields_max} fields "
                                                         f"at its top level{within}")
        if count > self.entries_max:  # the message of the rule the handler checks (SendMessage)
            return QuorumqError(self.entries_error, f"a request carries {self.entries_min}..{self.entries_max} "
                                                    f"{self.entries_name}")
        return None


class HandlerWrapper(grpc.aio.ServerInterceptor):
    """An interceptor that wraps each method's handler once: a method's handler is the same for
    every call, so whatever it does per call happens inside the call (the interceptors before one
    that caches, such as ConnectionLimits, never see a later call of the method)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}  # method -> its handler, wrapped

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler | None:
        """The handler wrapped, or None to leave this method's handler as it is."""
        raise NotImplementedError

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(handler_call_details)
            wrapped = self.wrap(handler, method) if handler is not None else None
            if wrapped is None:
                return handler
            self._wrapped[method] = wrapped
        return wrapped


def guarded(handler: grpc.RpcMethodHandler,
            check: Callable[[Any, grpc.aio.ServicerContext], Awaitable[object | None]]) -> grpc.RpcMethodHandler:
    """The handler with `check` awaited first in each of its calls, given the call's request (a
    stream of requests for a streaming method) and context: a result other than None is the call's
    answer (a server stream's one answer) and the handler does not run; a check may also abort."""
    kind = next(kind for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
                if getattr(handler, kind) is not None)
    behavior: Callable = getattr(handler, kind)
    if inspect.isasyncgenfunction(behavior):  # a server stream: checked as it opens
        async def answers(request, context):
            refused = await check(request, context)
            if refused is not None:
                yield refused
                return
            async for response in behavior(request, context):
                yield response
        return handler._replace(**{kind: answers})

    async def answer(request, context):
        refused = await check(request, context)
        if refused is not None:
            return refused
        result = behavior(request, context)  # gRPC's own defaults are not async
        return await result if inspect.isawaitable(result) else result
    return handler._replace(**{kind: answer})


class MalformedRequests(HandlerWrapper):
    """gRPC parses a request in its own code, and answers one that does not parse with UNKNOWN and
    a traceback in the log. Here the handler parses it instead: a request that does not parse fails
    with BAD_REQUEST (INVALID_ARGUMENT, the entry in the trailing metadata) and one log line. A
    method with a RequestBound has its request checked on its bytes first, so a request too large
    for it never becomes millions of objects."""

    def __init__(self, bounds: Mapping[str, RequestBound]) -> None:  # full method name -> its bound
        super().__init__()
        self._bounds = bounds

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler | None:
        if handler.request_deserializer is None:
            return None
        return _parsing_in_handler(handler, method, self._bounds.get(method))


def _parsing_in_handler(handler: grpc.RpcMethodHandler, method: str,
                        bound: RequestBound | None) -> grpc.RpcMethodHandler:
    """The handler with its request checked against its bound and parsed in the call: a refusal
    the method answers itself (bound.answer) reaches the handler's wrapper as a QuorumqError; the
    call fails with BAD_REQUEST when the request does not parse, with the refusal when the method
    has no answer for it."""
    parse = handler.request_deserializer
    answer_refusal = bound.answer if bound is not None and not handler.request_streaming else None

    async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> object:
        try:
            refused = bound.refusal(raw, method) if bound is not None else None
            if refused is None:
                return parse(raw)
        except (DecodeError, WireError) as error:
            log.warning("%s from %s: the request does not parse (%s), answered INVALID_ARGUMENT",
                        method, context.peer(), error)
            await abort(context, QuorumqError(Error.BAD_REQUEST, f"the request does not parse: {error}"))
        log.warning("%s from %s: refused unparsed: %s", method, context.peer(), refused)
        if answer_refusal is None:
            await abort(context, refused)
        return refused

    async def parsed_stream(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[object]:
        async for raw in raws:
            yield await parsed(raw, context)

    async def streamed(request, context):
        return parsed_stream(request, context)

    arrange = streamed if handler.request_streaming else parsed  # what the handler takes: a stream, or one request

    kind = next(kind for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
                if getattr(handler, kind) is not None)
    behavior: Callable = getattr(handler, kind)
    if inspect.isasyncgenfunction(behavior):
        async def answers(request, context):
            request = await arrange(request, context)
            if isinstance(request, QuorumqError):
                yield answer_refusal(request)
                return
            async for response in behavior(request, context):
                yield response
        return handler._replace(request_deserializer=None, **{kind: answers})

    async def answer(request, context):
        request = await arrange(request, context)
        if isinstance(request, QuorumqError):
            return answer_refusal(request)
        result = behavior(request, context)  # gRPC's own defaults are not async
        return await result if inspect.isawaitable(result) else result
    return handler._replace(request_deserializer=None, **{kind: answer})


class LimitedServer:
    """A grpc.aio.Server (its methods, through this) and its connection limits, whose closing of
    connections with unread answers runs from the server's start to its stop."""

    def __init__(self, server: grpc.aio.Server, limited: ConnectionLimits, port: int) -> None:
        self._server = server
        self._limited = limited
        self.port = port

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        """Ignored: a generated add_*_to_server gives every method as a generic handler too, which
        serves it alike (the interceptors included). grpc.aio keeps a pending request for each
        registered method and waits on all of them for every call (asyncio.wait), so each of the
        broker's 16 registered methods cost every call of every method some Python work."""

    async def start(self) -> None:
        self._limited.start(self.port)
        try:
            await self._server.start()
        except BaseException:  # no server to stop: nothing else would end the closing
            await self._limited.stop()
            raise

    async def stop(self, grace: float | None) -> None:
        try:
            await self._server.stop(grace)
        finally:
            await self._limited.stop()


def grpc_server(address: str, options: Sequence[tuple[str, object]] = (),
                interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                bounds: Mapping[str, RequestBound] | None = None, *, config: Config, clock: Clock,
                authentication: Sequence[grpc.aio.ServerInterceptor] = (),
                authorization: Sequence[grpc.aio.ServerInterceptor] = ()) -> LimitedServer:
    """A gRPC server that owns `address` alone. gRPC sets SO_REUSEPORT by default, so a second
    process configured with a taken port would bind it too and silently take a share of its
    connections (clients then reach whichever process the kernel picks); here it fails to start,
    unless its config shares the port on purpose (a proxy's grpcServerReusePort).
    `bounds`: what each method's request may hold, checked before it is parsed (MalformedRequests).
    `config` sets the limits on its connections (connection_limits.py) and whether it serves TLS
    (tls.py). `authentication` decides a call before its request is parsed (a cluster call's on its
    exact bytes), after the connection limits (protocol/authentication.py); `authorization` once it is
    parsed."""
    logging.getLogger(GRPC_CORE_LOGGER).addFilter(_UNDELIVERED)  # once: a logger keeps one of each filter
    soft_open_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    connections_max = config["grpcMaxConnections"] or limits.connections_max(soft_open_files)
    connections = channel_options(config["grpcClientIdleTimeMills"], config["grpcMaxConcurrentCallsPerConnection"],
                                  connections_max)
    peers = Peers(config["grpcMaxConnectionsPerAddress"], config["grpcClientIdleTimeMills"],
                  config["grpcPendingAnswerBytesPerConnection"], config["grpcPendingAnswerBytesTotal"],
                  config["grpcUnreadAnswerTimeoutMills"])
    limited = ConnectionLimits(peers, clock.monotonic_ms)
    reuse_port = 1 if config.get("grpcServerReusePort") else 0  # proxies may share one port on purpose
    server = grpc.aio.server(options=[*options, *connections, ("grpc.so_reuseport", reuse_port)],
                             interceptors=[limited, *authentication,
                                           MalformedRequests(bounds or {}), *authorization, *interceptors])
    credentials = tls.server_credentials(config)
    try:
        port = (server.add_insecure_port(address) if credentials is None
                else server.add_secure_port(address, credentials))
    except RuntimeError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {address} (in use, or not "
                                                 f"an address of this host): {error}") from None
    return LimitedServer(server, limited, port)
