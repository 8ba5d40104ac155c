"""Controller mode: every replica of a broker group answers the official client.

The route lists all replicas of a controller-mode group (v5.group_endpoints), and the official
client's channel keeps to one reachable address among them (gRPC pick_first) and moves to another
when that one dies. So each replica must serve what the client sends it: the master serves it, and
a replica that is not the master forwards the client's data requests, with their metadata, to the
master the controller named. A client therefore reaches a new master as soon as the election is
known, without waiting for its 30 s route refresh. Routes and settings (QueryRoute, Telemetry) are
answered locally; a fenced replica (no master known) answers as itself, refusing writes.
"""

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq.broker.broker import Broker
from quorumq.client.routes import FAST_RECONNECT
from quorumq.core.quorum import BrokerRole
from quorumq.endpoint.messaging import MessagingService

UNARY = ("Heartbeat", "NotifyClientTermination", "QueryAssignment", "SendMessage", "AckMessage",
         "ChangeInvisibleDuration", "GetOffset", "UpdateOffset", "QueryOffset", "EndTransaction",
         "ForwardMessageToDeadLetterQueue")
SERVER_STREAMS = ("ReceiveMessage", "PullMessage")


def _forwarded_metadata(context) -> tuple[tuple[str, str], ...]:
    """The client's own headers (client id, language, namespace, ...), without gRPC's."""
    return tuple((key, value) for key, value in context.invocation_metadata() or ()
                 if not key.startswith((":", "grpc-")) and key not in ("user-agent", "te", "content-type"))


class ForwardingMessagingService(MessagingService):
    def __init__(self, broker: Broker, route_lookup) -> None:
        super().__init__(broker, route_lookup)
        self._channels: dict[str, grpc.aio.Channel] = {}

    def master_stub(self) -> v5_grpc.MessagingServiceStub | None:
        """The master's v5 stub when this replica should forward, else None."""
        broker = self.broker
        address = broker.master_address
        if broker.role is not BrokerRole.SLAVE or not address or address == broker.address:
            return None
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address, options=FAST_RECONNECT)
        return v5_grpc.MessagingServiceStub(self._channels[address])


def _forward_unary(name: str):
    serve_locally = getattr(MessagingService, name)

    async def handler(self: ForwardingMessagingService, request, context):
        stub = self.master_stub()
        if stub is None:
            return await serve_locally(self, request, context)
        try:
            return await getattr(stub, name)(request, timeout=context.time_remaining(),
                                             metadata=_forwarded_metadata(context))
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"forwarding to the master {self.broker.master_address}: {exc.details()}")

    handler.__name__ = name
    return handler


def _forward_stream(name: str):
    serve_locally = getattr(MessagingService, name)

    async def handler(self: ForwardingMessagingService, request, context):
        stub = self.master_stub()
        if stub is None:
            async for response in serve_locally(self, request, context):
                yield response
            return
        try:
            async for response in getattr(stub, name)(request, timeout=context.time_remaining(),
                                                      metadata=_forwarded_metadata(context)):
                yield response
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"forwarding to the master {self.broker.master_address}: {exc.details()}")

    handler.__name__ = name
    return handler


for _name in UNARY:
    setattr(ForwardingMessagingService, _name, _forward_unary(_name))
for _name in SERVER_STREAMS:
    setattr(ForwardingMessagingService, _name, _forward_stream(_name))
