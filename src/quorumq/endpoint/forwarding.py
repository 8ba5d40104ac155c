"""Controller mode: every replica of a broker group answers the official client.

The route lists each queue of a controller-mode group once per replica (v5.message_queues), and the
official clients spread their requests over those entries and move off an address that fails. So
each replica must serve what the client sends it: the master serves it, and
a replica that is not the master forwards the client's data requests, with their metadata, to the
master the controller named. A client therefore reaches a new master as soon as the election is
known, without waiting for its 30 s route refresh. A request the master could not be reached for
waits, within the client's deadline, for the controller to name another master and goes there (or
is served here, when this replica is elected): failing it would make the Node.js, Java, Go and C#
clients isolate this replica's address as well as the dead master's. Routes and settings
(QueryRoute, Telemetry) are answered locally; a fenced replica (no master known) answers as itself,
refusing writes.
"""

import asyncio

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq.broker.broker import Broker
from quorumq.client.routes import open_channel
from quorumq.core.quorum import BrokerRole
from quorumq.endpoint.messaging import MessagingService
from quorumq.protocol.v5 import forwarded_metadata

UNARY = ("Heartbeat", "NotifyClientTermination", "QueryAssignment", "SendMessage", "AckMessage",
         "ChangeInvisibleDuration", "GetOffset", "UpdateOffset", "QueryOffset", "EndTransaction",
         "ForwardMessageToDeadLetterQueue", "RecallMessage")
SERVER_STREAMS = ("ReceiveMessage", "PullMessage")
# How often a request whose master was unreachable looks for the next one: elections take tens of
# ms after a master's death, and a look is one comparison.
NEW_MASTER_POLL_S = 0.01
# What a request keeps of the client's deadline for the call to the new master.
NEW_MASTER_CALL_S = 0.5


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
            self._channels[address] = open_channel(address)
        return v5_grpc.MessagingServiceStub(self._channels[address])

    async def master_replaced(self, failed: grpc.aio.AioRpcError, context) -> bool:
        """After a forwarded call failed: whether the master was unreachable and the controller
        named another one (or this replica) while the client's deadline left time to call it."""
        remaining = context.time_remaining()
        if failed.code() is not grpc.StatusCode.UNAVAILABLE or remaining is None:
            return False
        unreachable = self.broker.master_address
        deadline = self.broker.clock.monotonic() + remaining - NEW_MASTER_CALL_S
        while self.broker.master_address == unreachable:
            if self.broker.clock.monotonic() >= deadline:
                return False
            await asyncio.sleep(NEW_MASTER_POLL_S)
        return True


def _forward_unary(name: str):
    serve_locally = getattr(MessagingService, name)

    async def handler(self: ForwardingMessagingService, request, context):
        while (stub := self.master_stub()) is not None:
            try:
                return await getattr(stub, name)(request, timeout=context.time_remaining(),
                                                 metadata=forwarded_metadata(context))
            except grpc.aio.AioRpcError as exc:
                if not await self.master_replaced(exc, context):
                    await context.abort(exc.code(),
                                        f"forwarding to the master {self.broker.master_address}: {exc.details()}")
        return await serve_locally(self, request, context)

    handler.__name__ = name
    return handler


def _forward_stream(name: str):
    serve_locally = getattr(MessagingService, name)

    async def handler(self: ForwardingMessagingService, request, context):
        while (stub := self.master_stub()) is not None:
            answered = False
            try:
                async for response in getattr(stub, name)(request, timeout=context.time_remaining(),
                                                          metadata=forwarded_metadata(context)):
                    answered = True
                    yield response
                return
            except grpc.aio.AioRpcError as exc:
                # Once the client has part of an answer, it must not get a second one from elsewhere.
                if answered or not await self.master_replaced(exc, context):
                    await context.abort(exc.code(),
                                        f"forwarding to the master {self.broker.master_address}: {exc.details()}")
        async for response in serve_locally(self, request, context):
            yield response

    handler.__name__ = name
    return handler


for _name in UNARY:
    setattr(ForwardingMessagingService, _name, _forward_unary(_name))
for _name in SERVER_STREAMS:
    setattr(ForwardingMessagingService, _name, _forward_stream(_name))
