"""The bookkeeping behind a server's per-address connection cap and its room for unsent answers."""

from quorumq.connection_limits import Peers, client_address

IDLE_MS = 1000


def test_a_client_address_is_the_peer_without_its_port():
    assert client_address("ipv4:127.0.0.1:50123") == "ipv4:127.0.0.1"
    assert client_address("ipv6:[::1]:50123") == "ipv6:[::1]"


def test_a_new_connection_past_its_address_cap_is_refused_and_other_addresses_are_not():
    peers = Peers(per_address_max=2, idle_ms=IDLE_MS, pending_bytes_max=100)
    assert peers.call_started("ipv4:10.0.0.1:1", 0) and peers.call_started("ipv4:10.0.0.1:2", 0)
    assert peers.call_started("ipv4:10.0.0.1:1", 0), "a counted connection calls again"
    assert not peers.call_started("ipv4:10.0.0.1:3", 0)
    assert peers.call_started("ipv4:10.0.0.2:3", 0)
    assert peers.connections("ipv4:10.0.0.1") == 2 and len(peers) == 3


def test_a_connection_idle_past_the_timeout_is_forgotten_and_one_with_a_call_in_flight_never():
    peers = Peers(per_address_max=2, idle_ms=IDLE_MS, pending_bytes_max=100)
    peers.call_started("ipv4:10.0.0.1:1", 0)  # a Telemetry stream: open for good
    peers.call_started("ipv4:10.0.0.1:2", 0)
    assert peers.call_ended("ipv4:10.0.0.1:2", 10) == 0
    assert not peers.call_started("ipv4:10.0.0.1:3", 10 + IDLE_MS), "not idle past the timeout yet"
    assert peers.call_started("ipv4:10.0.0.1:3", 11 + IDLE_MS), "gRPC closed :2, so :3 takes its place"
    assert not peers.call_started("ipv4:10.0.0.1:4", 100 * IDLE_MS), ":1 and :3 have calls in flight"


def test_many_addresses_are_forgotten_once_idle():
    peers = Peers(per_address_max=2, idle_ms=IDLE_MS, pending_bytes_max=100)
    for port in range(4):
        peers.call_started(f"ipv4:10.0.1.{port}:1", 0)
        peers.call_ended(f"ipv4:10.0.1.{port}:1", 0)
    peers.call_started("ipv4:10.0.2.1:1", 2 * IDLE_MS)  # the fifth peer, above twice the cap
    assert len(peers) == 1


def test_answers_wait_for_room_and_one_answer_always_goes():
    peers = Peers(per_address_max=2, idle_ms=IDLE_MS, pending_bytes_max=100)
    peer = "ipv4:10.0.0.1:1"
    peers.call_started(peer, 0)
    assert peers.hold(peer, 500), "alone, an answer larger than the room goes"
    assert not peers.has_room(peer)
    peers.release(peer, 500)
    assert peers.hold(peer, 60) and peers.has_room(peer)
    assert not peers.hold(peer, 60), "past the room: it waits, counted, so no further call starts"
    assert not peers.has_room(peer) and not peers.may_send(peer, 60)
    peers.release(peer, 60)
    assert peers.may_send(peer, 60)
    peers.release(peer, 60)
    peers.call_ended(peer, 0)
    assert peers.call_started("ipv4:10.0.0.1:2", 0)
    assert len(peers) == 2, "a connection with answers pending is not forgotten"
