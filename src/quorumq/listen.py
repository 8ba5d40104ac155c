"""The gRPC servers' listening socket and what gRPC logs about their calls, one rule for the name
server, broker and controller."""

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
from google.protobuf.message import DecodeError

from quorumq.errors import Error, QuorumqError

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


class MalformedRequests(grpc.aio.ServerInterceptor):
    """gRPC parses a request in its own code, and answers one that does not parse with UNKNOWN and
    a traceback in the log. Here the handler parses it instead: a request that does not parse gets
    INVALID_ARGUMENT and one log line."""

    def __init__(self) -> None:
        # method -> its handler, wrapped once: a method's handler is the same for every call (the
        # interceptors behind this one, RpcLatency, keep their per-call state inside the call).
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(handler_call_details)
            if handler is None or handler.request_deserializer is None:
                return handler
            wrapped = self._wrapped[method] = _parsing_in_handler(handler, method)
        return wrapped


def _parsing_in_handler(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """The handler with its request parsed in the call: INVALID_ARGUMENT when it does not parse."""
    parse = handler.request_deserializer

    async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> object:
        try:
            return parse(raw)
        except DecodeError as error:
            log.warning("%s from %s: the request does not parse (%s), answered INVALID_ARGUMENT",
                        method, context.peer(), error)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request does not parse: {error}")

    async def parsed_stream(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[object]:
        async for raw in raws:
            yield await parsed(raw, context)

    async def arrange(request, context):  # what the handler takes: one parsed request, or a stream of them
        return parsed_stream(request, context) if handler.request_streaming else await parsed(request, context)

    kind = next(kind for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
                if getattr(handler, kind) is not None)
    behavior: Callable = getattr(handler, kind)
    if inspect.isasyncgenfunction(behavior):
        async def answers(request, context):
            async for response in behavior(await arrange(request, context), context):
                yield response
        return handler._replace(request_deserializer=None, **{kind: answers})

    async def answer(request, context):
        result = behavior(await arrange(request, context), context)  # gRPC's own defaults are not async
        return await result if inspect.isawaitable(result) else result
    return handler._replace(request_deserializer=None, **{kind: answer})


def grpc_server(address: str, options: Sequence[tuple[str, object]] = (),
                interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> grpc.aio.Server:
    """A gRPC server that owns `address` alone. gRPC sets SO_REUSEPORT by default, so a second
    process configured with a taken port would bind it too and silently take a share of its
    connections (clients then reach whichever process the kernel picks); here it fails to start."""
    logging.getLogger(GRPC_CORE_LOGGER).addFilter(_UNDELIVERED)  # once: a logger keeps one of each filter
    server = grpc.aio.server(options=[*options, ("grpc.so_reuseport", 0)],
                             interceptors=[MalformedRequests(), *interceptors])
    try:
        server.add_insecure_port(address)
    except RuntimeError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {address} (in use, or not "
                                                 f"an address of this host): {error}") from None
    return server
