"""Limits on what the clients of a gRPC server hold: its connections, per client address, and the
answer bytes a connection has not taken yet. gRPC bounds the total of connections, the calls of one
connection and how long a connection may sit idle (channel args, `channel_options`); it shows a
server none of its connections, so the rest is counted here from the calls, by their peer
(`context.peer()`, "ipv4:1.2.3.4:port": one per connection). An address at its cap has its
connections looked up among the process's descriptors (`open_connections`), so that one a client
closed no longer counts.

A connection whose client never reads keeps its unsent answers in the server's memory until the
client's deadline passes or the connection closes: gRPC cannot reset one stream from the server
(an abort with an answer still waiting for flow control leaves it queued). So a connection may hold
at most `grpcPendingAnswerBytesPerConnection` of answers handed to gRPC and not yet sent: a further
answer waits for room (back-pressure), and past PENDING_ANSWER_WAIT_S its call ends with
TOO_MANY_REQUESTS, its answer dropped. The server's connections together hold at most
`grpcPendingAnswerBytesTotal`: an answer past it is refused at once with TOO_MANY_REQUESTS. And a
connection whose answers make no progress for `grpcUnreadAnswerTimeoutMills` (none sent while it
holds some) is closed, which frees them: gRPC offers no call for that, so its socket is found among
the process's descriptors by its two ends and shut down."""

import asyncio
import inspect
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

import grpc

from quorumq import limits
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort

log = logging.getLogger("quorumq.listen")


def channel_options(idle_ms: int, calls_per_connection: int, connections_max: int) -> list[tuple[str, int]]:
    """gRPC's own limits on a server's connections."""
    return [("grpc.max_connection_idle_ms", idle_ms),
            ("grpc.server_handshake_timeout_ms", limits.HANDSHAKE_TIMEOUT_MS),
            ("grpc.max_concurrent_streams", calls_per_connection),
            ("grpc.max_allowed_incoming_connections", connections_max)]


def client_address(peer: str) -> str:
    """The client's address in a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000"), port dropped."""
    return peer.rpartition(":")[0] or peer


@dataclass
class _Peer:
    calls: int = 0  # in flight
    pending_bytes: int = 0  # answers handed to gRPC, not sent yet
    last_active_ms: int = 0  # when its last call ended
    progress_ms: int = 0  # when it last sent an answer, or began to hold one with none held


class Peers:
    """Pure bookkeeping: the connections (peers) of each client address that made calls, and what
    each has in flight. A peer without calls is forgotten once gRPC closed it for being idle longer
    than the idle timeout (max_connection_idle), or once its address is at the cap and the caller
    finds its connection closed (`forget_closed`); one with a call in flight (a Telemetry stream)
    never is."""

    def __init__(self, per_address_max: int, idle_ms: int, pending_bytes_max: int, pending_bytes_total_max: int,
                 unread_ms: int) -> None:
        self.per_address_max = per_address_max
        self.idle_ms = idle_ms
        self.pending_bytes_max = pending_bytes_max
        self.pending_bytes_total_max = pending_bytes_total_max
        self.unread_ms = unread_ms
        self.pending_bytes_total = 0  # of every peer
        self._peers: dict[str, _Peer] = {}
        self._by_address: dict[str, set[str]] = {}
        self._all_open_ms: dict[str, int] = {}  # address -> when forget_closed last forgot none of its peers

    def __len__(self) -> int:
        return len(self._peers)

    def connections(self, address: str) -> int:
        return len(self._by_address.get(address, ()))

    def call_started(self, peer: str, now_ms: int) -> bool:
        """Count a call of `peer`; False (nothing counted) when it is a new connection of an address
        that has per_address_max already (forget_closed may make room)."""
        known = self._peers.get(peer)
        if known is None:
            address = client_address(peer)
            if len(self._by_address.get(address, ())) >= self.per_address_max:
                self._forget_idle(address, now_ms)
                if len(self._by_address.get(address, ())) >= self.per_address_max:
                    return False
            self._peers[peer] = _Peer(calls=1)
            self._by_address.setdefault(address, set()).add(peer)
            if len(self._peers) > 2 * self.per_address_max:  # many addresses: forget their idle peers too
                for other in list(self._by_address):
                    self._forget_idle(other, now_ms)
            return True
        known.calls += 1
        return True

    def call_ended(self, peer: str, now_ms: int) -> int:
        """Count the end of a call of `peer`; its calls still in flight."""
        known = self._peers[peer]
        known.calls -= 1
        known.last_active_ms = now_ms
        return known.calls

    def has_room(self, peer: str) -> bool:
        """Whether the peer's unsent answers are below its room: only then does a call of it start."""
        return self._peers[peer].pending_bytes < self.pending_bytes_max

    def fits_total(self, size: int) -> bool:
        """Whether an answer of `size` bytes fits what every peer together may hold (one answer
        always does while none is held, however large)."""
        return self.pending_bytes_total + size <= self.pending_bytes_total_max or not self.pending_bytes_total

    def hold(self, peer: str, size: int, now_ms: int) -> bool:
        """Count an answer of `size` bytes as pending on the peer: whether it may go to gRPC now,
        within the room (one answer always may on a peer with no other pending, however large)."""
        known = self._peers[peer]
        if not known.pending_bytes:
            known.progress_ms = now_ms
        known.pending_bytes += size
        self.pending_bytes_total += size
        return self.may_send(peer, size)

    def may_send(self, peer: str, size: int) -> bool:
        """Whether an answer of `size` bytes held on the peer may go to gRPC now."""
        pending = self._peers[peer].pending_bytes
        return pending <= self.pending_bytes_max or pending == size

    def release(self, peer: str, size: int, now_ms: int) -> None:
        """The answer was sent, or its call ended without it."""
        known = self._peers[peer]
        known.pending_bytes -= size
        known.progress_ms = now_ms
        self.pending_bytes_total -= size

    def unread(self, now_ms: int) -> list[str]:
        """The peers that hold answers and sent none for longer than unread_ms: each is named once
        per unread_ms, so a peer whose connection is being closed is not named again at once."""
        found = [peer for peer, known in self._peers.items()
                 if known.pending_bytes and now_ms - known.progress_ms > self.unread_ms]
        for peer in found:
            self._peers[peer].progress_ms = now_ms
        return found

    def may_look_up(self, address: str, now_ms: int) -> bool:
        """Whether the address's open connections may be looked up for forget_closed: not within
        OPEN_CONNECTIONS_LOOKUP_INTERVAL_MS of a look-up that made no room."""
        last_ms = self._all_open_ms.get(address)
        return last_ms is None or now_ms - last_ms >= limits.OPEN_CONNECTIONS_LOOKUP_INTERVAL_MS

    def forget_closed(self, address: str, is_open: Callable[[str], bool], now_ms: int) -> None:
        """Forget the address's peers without calls whose connection is no longer open: a client
        that closed one would otherwise count until the idle timeout."""
        if not self._forget(address, lambda peer, known: not known.calls and not known.pending_bytes
                            and not is_open(peer)):
            self._all_open_ms[address] = now_ms

    def _forget_idle(self, address: str, now_ms: int) -> None:
        self._forget(address, lambda _, known: not known.calls and not known.pending_bytes
                     and now_ms - known.last_active_ms > self.idle_ms)

    def _forget(self, address: str, gone: Callable[[str, _Peer], bool]) -> int:
        """Forget the address's peers that are `gone`; how many."""
        peers = self._by_address.get(address, set())
        forgotten = [peer for peer in peers if gone(peer, self._peers[peer])]
        for peer in forgotten:
            peers.discard(peer)
            del self._peers[peer]
        if not peers:
            self._by_address.pop(address, None)
            self._all_open_ms.pop(address, None)
        return len(forgotten)


class ConnectionLimits(grpc.aio.ServerInterceptor):
    """Applies Peers to every call: a call from a connection past its address's cap, or whose answer
    finds no room in PENDING_ANSWER_WAIT_S or in the server's total, fails with TOO_MANY_REQUESTS
    (RESOURCE_EXHAUSTED) and a message saying which; a connection whose answers stay unread is
    closed."""

    def __init__(self, peers: Peers, monotonic_ms: Callable[[], int]) -> None:
        self.peers = peers
        self._monotonic_ms = monotonic_ms  # the server's Clock's
        self._port = 0  # the server's own, once it listens: the local end of its clients' connections
        self._sent: dict[str, asyncio.Event] = {}  # peer -> set when one of its answers was sent
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}  # method -> its handler, wrapped once
        self._closer: asyncio.Task | None = None  # closes the connections whose answers stay unread

    def start(self, port: int) -> None:
        """The server starts on `port`: from now on until `stop`, connections whose answers stay
        unread are closed."""
        self._port = port
        self._closer = asyncio.get_running_loop().create_task(self._close_unread())

    async def stop(self) -> None:
        if self._closer is not None:
            self._closer.cancel()
            await asyncio.gather(self._closer, return_exceptions=True)
            self._closer = None

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(handler_call_details)
            if handler is None:
                return handler
            wrapped = self._wrapped[method] = self._limited(handler)
        return wrapped

    def _limited(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        kind = next(kind for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
                    if getattr(handler, kind) is not None)
        behavior: Callable = getattr(handler, kind)
        if inspect.isasyncgenfunction(behavior):
            async def answers(request, context):
                peer = await self._start(context)
                async for response in behavior(request, context):
                    size = await self._hold(peer, response, context)
                    try:
                        yield response  # resumed once gRPC sent it
                    finally:
                        self._release(peer, size)
            return handler._replace(**{kind: answers})

        async def answer(request, context):
            peer = await self._start(context)
            result = behavior(request, context)
            response = await result if inspect.isawaitable(result) else result
            if handler.response_streaming:  # a handler that writes its answers itself (none of quorumq's)
                return response
            size = await self._hold(peer, response, context)
            context.add_done_callback(lambda _: self._release(peer, size))  # once the answer is sent, or the call ends
            return response
        return handler._replace(**{kind: answer})

    async def _start(self, context) -> str:
        """Count the call; it starts once its connection has room for answers (back-pressure)."""
        peer, now_ms = context.peer(), self._monotonic_ms()
        if not self.peers.call_started(peer, now_ms):  # at the cap: count only open connections
            address = client_address(peer)
            looked_up = self.peers.may_look_up(address, now_ms)
            if looked_up:
                self.peers.forget_closed(address, open_connections(self._port), now_ms)
            if not (looked_up and self.peers.call_started(peer, now_ms)):
                log.warning("%s: refused a call, its address has %d connections already", peer,
                            self.peers.per_address_max)
                await abort(context, QuorumqError(Error.TOO_MANY_REQUESTS, f"{address} has "
                                                  f"{self.peers.per_address_max} connections with calls already "
                                                  "(grpcMaxConnectionsPerAddress); reuse one"))
        context.add_done_callback(lambda _: self._ended(peer))
        if not self.peers.has_room(peer):
            await self._room(peer, lambda: self.peers.has_room(peer), context)
        return peer

    def _ended(self, peer: str) -> None:
        if not self.peers.call_ended(peer, self._monotonic_ms()):
            self._sent.pop(peer, None)

    async def _hold(self, peer: str, response, context) -> int:
        """Count `response` as pending on the peer at once (so no further call starts) and wait until
        it fits the room; its size."""
        size = response.ByteSize() if hasattr(response, "ByteSize") else 0
        if not self.peers.fits_total(size):
            log.warning("%s: refused an answer of %d bytes, the server's connections hold %d bytes of answers not "
                        "sent yet", peer, size, self.peers.pending_bytes_total)
            await abort(context, QuorumqError(Error.TOO_MANY_REQUESTS, "the server's connections hold "
                                              f"{self.peers.pending_bytes_total_max} bytes of answers their clients "
                                              "have not read (grpcPendingAnswerBytesTotal); try again later"))
        if not self.peers.hold(peer, size, self._monotonic_ms()):
            try:
                await self._room(peer, lambda: self.peers.may_send(peer, size), context)
            except BaseException:
                self._release(peer, size)
                raise
        return size

    async def _room(self, peer: str, fits: Callable[[], bool], context) -> None:
        """Wait until `fits()` (the peer's unsent answers leave room); RESOURCE_EXHAUSTED past the wait."""
        deadline_ms = self._monotonic_ms() + limits.PENDING_ANSWER_WAIT_S * 1000
        while not fits():
            left = (deadline_ms - self._monotonic_ms()) / 1000
            if left <= 0:
                log.warning("%s: refused a call, its connection has not taken the %d bytes of answers it holds "
                            "in %g s", peer, self.peers.pending_bytes_max, limits.PENDING_ANSWER_WAIT_S)
                await abort(context, QuorumqError(Error.TOO_MANY_REQUESTS, "this connection has not read the answers "
                                                  f"it asked for ({self.peers.pending_bytes_max} bytes, "
                                                  "grpcPendingAnswerBytesPerConnection); read them before asking "
                                                  "for more"))
            sent = self._sent.setdefault(peer, asyncio.Event())
            sent.clear()
            try:
                await asyncio.wait_for(sent.wait(), left)
            except TimeoutError:
                pass

    def _release(self, peer: str, size: int) -> None:
        self.peers.release(peer, size, self._monotonic_ms())
        sent = self._sent.get(peer)
        if sent is not None:
            sent.set()

    async def _close_unread(self) -> None:
        while True:
            await asyncio.sleep(self.peers.unread_ms / 4000)
            unread = self.peers.unread(self._monotonic_ms())
            closed = close_connections(unread, self._port) if unread else set()
            for peer in unread:
                log.warning("%s: %s its connection, which sent none of the answers it holds in %d ms "
                            "(grpcUnreadAnswerTimeoutMills)", peer,
                            "closed" if peer in closed else "found no socket of", self.peers.unread_ms)


def close_connections(peers: Iterable[str], port: int) -> set[str]:
    """Shut down the TCP connections of this process whose local port is `port` and whose other
    ends are the gRPC peers ("ipv4:127.0.0.1:5000"), in one walk of its descriptors: gRPC then ends
    their calls and drops what they hold. The peers whose connection was found and shut down
    (shutdown acts on the socket, so a duplicate does)."""
    wanted = {remote: peer for peer in peers if (remote := _remote(peer)) is not None}
    closed = set()
    for other, sock in _connections(port):
        peer = wanted.pop(other, None)
        if peer is None:
            continue
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # closed meanwhile
            continue
        closed.add(peer)
        if not wanted:
            break
    return closed


def open_connections(port: int) -> Callable[[str], bool]:
    """Whether a gRPC peer's TCP connection to `port` is open in this process, from one walk of its
    descriptors; a peer whose address does not parse counts as open."""
    remotes = {other for other, _ in _connections(port)}
    return lambda peer: (remote := _remote(peer)) is None or remote in remotes


def _remote(peer: str) -> tuple[str, int] | None:
    """The other end of a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:%5B::1%5D:5000") as getpeername
    names it."""
    host, _, port = unquote(peer.partition(":")[2]).rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


def _connections(port: int) -> Iterator[tuple[tuple[str, int], socket.socket]]:
    """The TCP connections among this process's descriptors whose local port is `port`: each one's
    other end, and a duplicate of its socket (of the socket's own family), open while it is looked at."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(fd))) as sock:
                if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.getsockname()[1] != port:
                    continue
                other_host, other_port = sock.getpeername()[:2]
                # gRPC listens on dual-stack sockets: an IPv4 client's address is IPv4-mapped there.
                yield (other_host.removeprefix("::ffff:"), other_port), sock
        except OSError:  # closed meanwhile, or not connected
            continue
