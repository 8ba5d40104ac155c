"""A client of the controllers (controller mode): finds the leader among `controllerAddr` and asks
it. A controller that is not the leader answers CONTROLLER_NOT_LEADER with the leader's address,
which the next attempt uses; an unreachable one is skipped."""

import grpc

from quorumq import limits
from quorumq.client.errors import ClientError
from quorumq.client.routes import FAST_RECONNECT
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc

CONTROLLER_NOT_LEADER = 2007  # core/controller_state.Code; kept literal so clients need not import the core
CALL_TIMEOUT_S = 3.0


def controller_addresses(text: str) -> list[str]:
    """controllerAddr: host:port entries separated by ';' (RocketMQ's form), ',' also accepted."""
    addresses = [part.strip() for part in text.replace(",", ";").split(";") if part.strip()]
    if not addresses:
        raise ValueError("no controller address given")
    if len(addresses) > limits.CONTROLLER_ADDRESSES_MAX:
        raise ValueError(f"at most {limits.CONTROLLER_ADDRESSES_MAX} controller addresses")
    return addresses


class ControllerClient:
    def __init__(self, addresses: list[str], timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.addresses = list(addresses)
        self.leader = self.addresses[0]  # the best guess; corrected by the answers
        self._timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, address: str | None = None) -> pb_grpc.ControllerStub:
        address = address or self.leader
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address, options=FAST_RECONNECT)
        return pb_grpc.ControllerStub(self._channels[address])

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def call(self, method: str, request) -> pb.ControllerReply:
        """Ask the leader; raises ClientError when no controller leads or none answers."""
        candidates = [self.leader] + [address for address in self.addresses if address != self.leader]
        last_error = "no controller answered"
        for _ in range(2 * len(self.addresses) + 1):
            if not candidates:
                break
            address = candidates.pop(0)
            try:
                reply = await getattr(self.stub(address), method)(request, timeout=self._timeout_s)
            except grpc.aio.AioRpcError as exc:
                last_error = f"controller {address}: {exc.code().name} {exc.details()}"
                continue
            if isinstance(reply, pb.ControllerReply) and reply.code == CONTROLLER_NOT_LEADER:
                last_error = f"controller {address} does not lead (leader: {reply.leader_address or 'none'})"
                if reply.leader_address and reply.leader_address != address:
                    candidates.insert(0, reply.leader_address)
                continue
            self.leader = address
            return reply
        raise ClientError("SERVICE_NOT_AVAILABLE", last_error)

    async def metadata(self) -> pb.ControllerMetaData:
        """The controllers as one of them sees them, the leader's view if it answers."""
        last_error = "no controller answered"
        for address in [self.leader] + [a for a in self.addresses if a != self.leader]:
            try:
                meta = await self.stub(address).GetMetaData(pb.Empty(), timeout=self._timeout_s)
            except grpc.aio.AioRpcError as exc:
                last_error = f"controller {address}: {exc.code().name} {exc.details()}"
                continue
            if meta.is_leader or not meta.leader_address:
                return meta
            self.leader = meta.leader_address
            try:
                return await self.stub().GetMetaData(pb.Empty(), timeout=self._timeout_s)
            except grpc.aio.AioRpcError:
                return meta
        raise ClientError("SERVICE_NOT_AVAILABLE", last_error)
