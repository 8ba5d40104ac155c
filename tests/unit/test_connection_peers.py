"""The bookkeeping behind a server's per-address connection cap and its room for unsent answers, how
the server finds which of its connections are open and closes those whose answers stay unread."""

import asyncio
import socket

import pytest

from quorumq import limits
from quorumq.clock import Clock
from quorumq.config import Config, Kind
from quorumq.connection_limits import Peers, client_address, close_connections, open_connections
from quorumq.listen import grpc_server

IDLE_MS = 1000
UNREAD_MS = 5000


def new_peers() -> Peers:
    return Peers(per_address_max=2, idle_ms=IDLE_MS, pending_bytes_max=100, pending_bytes_total_max=250,
                 unread_ms=UNREAD_MS)


def test_a_client_address_is_the_peer_without_its_port():
    assert client_address("ipv4:127.0.0.1:50123") == "ipv4:127.0.0.1"
    assert client_address("ipv6:[::1]:50123") == "ipv6:[::1]"


def test_a_new_connection_past_its_address_cap_is_refused_and_other_addresses_are_not():
    peers = new_peers()
    assert peers.call_started("ipv4:10.0.0.1:1", 0) and peers.call_started("ipv4:10.0.0.1:2", 0)
    assert peers.call_started("ipv4:10.0.0.1:1", 0), "a counted connection calls again"
    assert not peers.call_started("ipv4:10.0.0.1:3", 0)
    assert peers.call_started("ipv4:10.0.0.2:3", 0)
    assert peers.connections("ipv4:10.0.0.1") == 2 and len(peers) == 3


def test_a_connection_idle_past_the_timeout_is_forgotten_and_one_with_a_call_in_flight_never():
    peers = new_peers()
    peers.call_started("ipv4:10.0.0.1:1", 0)  # a Telemetry stream: open for good
    peers.call_started("ipv4:10.0.0.1:2", 0)
    assert peers.call_ended("ipv4:10.0.0.1:2", 10) == 0
    assert not peers.call_started("ipv4:10.0.0.1:3", 10 + IDLE_MS), "not idle past the timeout yet"
    assert peers.call_started("ipv4:10.0.0.1:3", 11 + IDLE_MS), "gRPC closed :2, so :3 takes its place"
    assert not peers.call_started("ipv4:10.0.0.1:4", 100 * IDLE_MS), ":1 and :3 have calls in flight"


def test_at_the_cap_a_closed_connection_without_calls_is_forgotten_and_an_open_one_or_one_with_a_call_never():
    peers = new_peers()
    streaming, closed, held, new = (f"ipv4:10.0.0.1:{port}" for port in (1, 2, 3, 4))
    other_address = "ipv4:10.0.0.2:1"
    peers.call_started(streaming, 0)  # a call in flight
    for peer in (closed, other_address):
        peers.call_started(peer, 0)
        peers.call_ended(peer, 0)
    assert not peers.call_started(new, 0)
    peers.forget_closed("ipv4:10.0.0.1", set[str]().__contains__, 0)  # no socket found, not even streaming's
    assert peers.connections("ipv4:10.0.0.1") == 1 and peers.connections("ipv4:10.0.0.2") == 1
    assert peers.call_started(held, 0), "closed's place is free"
    peers.call_ended(held, 0)
    peers.forget_closed("ipv4:10.0.0.1", {held}.__contains__, 0)
    assert not peers.call_started(new, 0), "streaming has a call in flight and held is open"


def test_after_a_look_up_found_every_connection_open_the_next_waits():
    peers = new_peers()
    address, interval_ms = "ipv4:10.0.0.1", limits.OPEN_CONNECTIONS_LOOKUP_INTERVAL_MS
    for port in (1, 2):
        peers.call_started(f"{address}:{port}", 0)
        peers.call_ended(f"{address}:{port}", 0)
    assert peers.may_look_up(address, 0)
    peers.forget_closed(address, lambda _: True, 0)
    assert not peers.may_look_up(address, interval_ms - 1) and peers.may_look_up(address, interval_ms)


def require_ipv6_loopback() -> None:
    """Skip the test on a host without IPv6 (no ::1 to bind)."""
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError as error:
        pytest.skip(f"no IPv6 loopback: {error}")


def check_open_connections(server: socket.socket, hosts: list[str], peer_names: list[str]) -> None:
    """Connect from each host to `server`: each gRPC peer name (its `{port}` filled with the client's
    port) counts as open, and as closed once the server closed its side."""
    port = server.getsockname()[1]
    clients = [socket.create_connection((host, port)) for host in hosts]
    accepted = [server.accept()[0] for _ in clients]
    peers = [name.format(port=client.getsockname()[1]) for name, client in zip(peer_names, clients)]
    try:
        assert all(map(open_connections(port), peers))
        assert open_connections(port)("unix:/tmp/s"), "a peer that does not parse counts as open"
        for sock in accepted:
            sock.close()
        assert not any(map(open_connections(port), peers))
    finally:
        for sock in clients + accepted:
            sock.close()


def test_the_open_ipv4_connections_of_a_port_are_those_among_the_process_descriptors():
    with socket.create_server(("127.0.0.1", 0)) as server:
        check_open_connections(server, ["127.0.0.1"], ["ipv4:127.0.0.1:{port}"])


def test_on_a_dual_stack_port_ipv4_and_ipv6_connections_are_found_among_the_process_descriptors():
    require_ipv6_loopback()
    with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as server:
        # as gRPC names them: an IPv4 client by its own address, an IPv6 one percent-encoded
        check_open_connections(server, ["127.0.0.1", "::1"], ["ipv4:127.0.0.1:{port}", "ipv6:%5B::1%5D:{port}"])


def test_the_connections_of_several_peers_are_shut_down_in_one_call():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        accepted = [server.accept()[0] for _ in clients]
        stalled, reading = clients[:2], clients[2]
        peers = [f"ipv4:127.0.0.1:{client.getsockname()[1]}" for client in stalled]
        try:
            gone = "ipv4:127.0.0.1:1"  # no connection of this process
            assert close_connections([*peers, gone, "unix:/tmp/s"], port) == set(peers)
            for client in stalled:
                client.settimeout(5)
                assert client.recv(1) == b"", "the server's end was shut down"
            accepted[2].sendall(b"x")
            assert reading.recv(1) == b"x", "another peer's connection stays open"
        finally:
            for sock in clients + accepted:
                sock.close()


def closers() -> list[asyncio.Task]:
    """The tasks that close connections whose answers stay unread."""
    return [task for task in asyncio.all_tasks() if task.get_coro().__name__ == "_close_unread"]


async def test_unread_connections_are_looked_for_from_the_servers_start_to_its_stop():
    server = grpc_server("127.0.0.1:0", config=Config(Kind.BROKER, {}), clock=Clock())
    assert server.port > 0, "the port the server listens on, not the 0 it was given"
    await server.start()
    try:
        assert len(closers()) == 1
    finally:
        await server.stop(None)
    assert not closers()


async def test_a_server_that_fails_to_start_leaves_nothing_looking_for_unread_connections(monkeypatch):
    server = grpc_server("127.0.0.1:0", config=Config(Kind.BROKER, {}), clock=Clock())

    async def fails() -> None:
        raise RuntimeError("the server did not start")

    monkeypatch.setattr(server._server, "start", fails)
    try:
        with pytest.raises(RuntimeError):
            await server.start()
        assert not closers()
    finally:
        await server.stop(None)


def test_many_addresses_are_forgotten_once_idle():
    peers = new_peers()
    for port in range(4):
        peers.call_started(f"ipv4:10.0.1.{port}:1", 0)
        peers.call_ended(f"ipv4:10.0.1.{port}:1", 0)
    peers.call_started("ipv4:10.0.2.1:1", 2 * IDLE_MS)  # the fifth peer, above twice the cap
    assert len(peers) == 1


def test_answers_wait_for_room_and_one_answer_always_goes():
    peers = new_peers()
    peer = "ipv4:10.0.0.1:1"
    peers.call_started(peer, 0)
    assert peers.hold(peer, 500, 0), "alone, an answer larger than the room goes"
    assert not peers.has_room(peer)
    peers.release(peer, 500, 0)
    assert peers.hold(peer, 60, 0) and peers.has_room(peer)
    assert not peers.hold(peer, 60, 0), "past the room: it waits, counted, so no further call starts"
    assert not peers.has_room(peer) and not peers.may_send(peer, 60)
    peers.release(peer, 60, 0)
    assert peers.may_send(peer, 60)
    peers.release(peer, 60, 0)
    peers.call_ended(peer, 0)
    assert peers.call_started("ipv4:10.0.0.1:2", 0)
    assert len(peers) == 2, "a connection with answers pending is not forgotten"


def test_the_peers_together_hold_at_most_the_total_and_one_answer_always_fits():
    peers = new_peers()
    assert peers.fits_total(1000), "alone, an answer larger than the total goes"
    for port in (1, 2, 3):
        peers.call_started(f"ipv4:10.0.0.1:{port}", 0)
    peers.hold("ipv4:10.0.0.1:1", 100, 0)
    peers.hold("ipv4:10.0.0.1:2", 100, 0)
    assert peers.fits_total(50) and not peers.fits_total(51)
    peers.release("ipv4:10.0.0.1:1", 100, 0)
    assert peers.fits_total(150) and peers.pending_bytes_total == 100


def test_a_peer_whose_answers_stay_unsent_is_named_once_per_timeout():
    peers = new_peers()
    reading, stalled, idle = "ipv4:10.0.0.1:1", "ipv4:10.0.0.1:2", "ipv4:10.0.0.2:1"
    for peer in (reading, stalled, idle):
        peers.call_started(peer, 0)
    peers.hold(reading, 60, 0)
    peers.hold(stalled, 60, 0)
    peers.hold(reading, 30, 4000)  # held with others: no progress
    peers.release(reading, 60, 4000)  # an answer sent: progress
    assert peers.unread(UNREAD_MS) == []
    assert peers.unread(UNREAD_MS + 1) == [stalled], "the idle peer holds nothing"
    assert peers.unread(UNREAD_MS + 2) == [], "named once: its connection is being closed"
    assert peers.unread(4000 + UNREAD_MS + 1) == [reading]
    assert sorted(peers.unread(3 * UNREAD_MS)) == [reading, stalled], "each again after another timeout"
