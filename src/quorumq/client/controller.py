"""A client of the controllers (controller mode): finds the leader among `controllerAddr` and asks
it. A controller that is not the leader answers CONTROLLER_NOT_LEADER with the leader's address;
an unreachable one is skipped (see next_address for where the next attempt goes)."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from quorumq import limits
from quorumq.client.errors import ClientError
from quorumq.client.routes import open_channel
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.auth import Credentials

CONTROLLER_NOT_LEADER = 2007  # core/controller_state.Code; kept literal so clients need not import the core
CALL_TIMEOUT_S = 3.0
T = TypeVar("T")
# HTTP/2 keepalive, for both ends of a connection to a controller: a frozen peer is found by an
# unanswered ping. gRPC ends the connection on grpc.http2.ping_timeout_ms (60 s unless set), so the
# timeout is given under both names.
KEEPALIVE = [
    ("grpc.keepalive_time_ms", limits.CONTROLLER_KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", limits.CONTROLLER_KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", limits.CONTROLLER_KEEPALIVE_TIMEOUT_MS),
]
# The calls' channels ping even with no call in flight (a client otherwise stops after 2 pings
# without sending data), so `unreachable` sees a frozen controller within seconds.
_CALL_OPTIONS = [*KEEPALIVE, ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)]


def controller_addresses(text: str) -> list[str]:
    """controllerAddr: host:port entries separated by ';' (RocketMQ's form), ',' also accepted."""
    addresses = [part.strip() for part in text.replace(",", ";").split(";") if part.strip()]
    if not addresses:
        raise ValueError("no controller address given")
    if len(addresses) > limits.CONTROLLER_ADDRESSES_MAX:
        raise ValueError(f"at most {limits.CONTROLLER_ADDRESSES_MAX} controller addresses")
    return addresses


def next_address(addresses: list[str], asked: str, hint: str) -> str:
    """Whom to ask after the controller at `asked` did not lead, naming `hint` the leader ("" when
    it named none or did not answer; a controller that stepped down may name itself). A
    controller names the leader by the address it knows itself by, which this process may not
    reach that way (a proxy, NAT): the configured address that is the hint, else the configured
    address after `asked`. A hint that is not configured is taken only when a single address is
    (a DNS name in front of every controller): a list names every controller."""
    if hint == asked:
        hint = ""
    if hint in addresses or hint and len(addresses) == 1:
        return hint
    following = addresses.index(asked) + 1 if asked in addresses else 0
    return addresses[following % len(addresses)]


class ControllerClient:
    def __init__(self, addresses: list[str], timeout_s: float = CALL_TIMEOUT_S,
                 credentials: Credentials | None = None) -> None:
        self.addresses = list(addresses)
        self._credentials = credentials  # every call signed with them (client/signing.py)
        self.leader = self.addresses[0]  # the best guess; corrected by the answers
        self._timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stream_channels: dict[str, grpc.aio.Channel] = {}
        self.answers = 0  # answers from a leader so far
        self._answerer = ""  # the controller that gave the last one
        self._answered = asyncio.Event()  # replaced by a set one at each answer

    def redirect(self, asked: str, hint: str = "") -> None:
        """The controller at `asked` does not lead (it named `hint`) or did not answer."""
        self.leader = next_address(self.addresses, asked, hint)

    def _reached(self, address: str) -> None:
        """The controller at `address` answered as the leader."""
        self.leader = self._answerer = address
        self.answers += 1
        answered, self._answered = self._answered, asyncio.Event()
        answered.set()

    async def answered_elsewhere(self, address: str, since: int) -> None:
        """Return once the last of the answers after the `since`-th came from a controller other
        than `address`."""
        while not (self.answers > since and self._answerer != address):
            await self._answered.wait()

    def stub(self, address: str | None = None) -> pb_grpc.ControllerStub:
        address = address or self.leader
        if address not in self._channels:
            self._channels[address] = open_channel(address, *_CALL_OPTIONS, credentials=self._credentials)
        return pb_grpc.ControllerStub(self._channels[address])

    def stream_stub(self, address: str) -> pb_grpc.ControllerStub:
        """A stub on a connection of its own that does not ping: a broker that stops hearing the
        controller (a frozen controller, or a link that loses only the answers) keeps its
        heartbeat stream until it knows of a controller to go to (`unreachable`), rather than
        gRPC ending it, which the controller would take for the broker's death."""
        if address not in self._stream_channels:
            self._stream_channels[address] = open_channel(address, credentials=self._credentials)
        return pb_grpc.ControllerStub(self._stream_channels[address])

    async def unreachable(self, address: str, connect_timeout_s: float) -> None:
        """Return once the calls' connection to the controller at `address` is down and does not
        come up again within `connect_timeout_s` (a frozen controller's host still accepts the TCP
        connection, but nothing answers HTTP/2); a keepalive ping left unanswered ends it."""
        self.stub(address)
        channel = self._channels[address]
        while True:
            try:
                await asyncio.wait_for(channel.channel_ready(), connect_timeout_s)
            except TimeoutError:
                return
            await channel.wait_for_state_change(grpc.ChannelConnectivity.READY)

    async def close(self) -> None:
        for channel in [*self._channels.values(), *self._stream_channels.values()]:
            await channel.close()
        self._channels.clear()
        self._stream_channels.clear()

    async def call(self, method: str, request) -> pb.ControllerReply:
        """Ask the leader; raises ClientError when no controller leads or none answers."""
        def named_leader(reply) -> str | None:
            is_redirect = isinstance(reply, pb.ControllerReply) and reply.code == CONTROLLER_NOT_LEADER
            return reply.leader_address if is_redirect else None

        reply, error = await self._ask(lambda stub: getattr(stub, method)(request, timeout=self._timeout_s),
                                       named_leader)
        if reply is None:
            raise ClientError("SERVICE_NOT_AVAILABLE", error)
        return reply

    async def metadata(self) -> pb.ControllerMetaData:
        """The controllers as one of them sees them: the leader's view, else the last one heard (a
        controller that knows no leader sends the question on to the next address)."""
        heard: list[pb.ControllerMetaData] = []

        def named_leader(meta: pb.ControllerMetaData) -> str | None:
            heard.append(meta)
            return None if meta.is_leader else meta.leader_address

        meta, error = await self._ask(lambda stub: stub.GetMetaData(pb.Empty(), timeout=self._timeout_s),
                                      named_leader)
        if meta is None and not heard:
            raise ClientError("SERVICE_NOT_AVAILABLE", error)
        return meta if meta is not None else heard[-1]

    async def _ask(self, ask: Callable[[pb_grpc.ControllerStub], Awaitable[T]],
                   named_leader: Callable[[T], str | None]) -> tuple[T | None, str]:
        """`ask(stub)` the leader: an answer for which `named_leader` gives None is the leader's
        (a NOT_LEADER gives the address it names); each configured address is given one chance
        to answer at all. Returns the leader's answer, or None and why."""
        error, unanswered = "no controller answered", 0
        for _ in range(2 * len(self.addresses) + 1):
            address = self.leader
            try:
                answer = await ask(self.stub(address))
            except grpc.aio.AioRpcError as exc:
                error = f"controller {address}: {exc.code().name} {exc.details()}"
                self.redirect(address)
                unanswered += 1
                if unanswered == len(self.addresses):
                    break
                continue
            hint = named_leader(answer)
            if hint is None:
                self._reached(address)
                return answer, ""
            error = f"controller {address} does not lead (leader: {hint or 'none'})"
            self.redirect(address, hint)
        return None, error
