"""The partition proxies (F6, F7) against a real echo server: a blocked direction holds bytes back
until the link heals, and none are lost or reordered."""

import socket
import socketserver
import threading

import pytest

from harness import free_base_port
from network import DOWN, UP, Network
from quorumq.cli.up import CONTROLLER_PORT_OFFSET, HOST


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echoed_link():
    """A Network of one broker and one controller whose controller is an echo server; yields the
    network, its one controller link and a socket connected through it."""
    base_port = free_base_port()
    server = socketserver.ThreadingTCPServer((HOST, base_port + CONTROLLER_PORT_OFFSET), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    network = Network(base_port, replicas=1, controllers=1)
    [[link]] = network.controller_links.values()
    client = socket.create_connection(link.listen, timeout=5)
    try:
        yield network, link, client
    finally:
        client.close()
        network.close()
        server.shutdown()
        server.server_close()


def received(client: socket.socket, size: int, timeout: float) -> bytes:
    client.settimeout(timeout)
    data = b""
    try:
        while len(data) < size:
            chunk = client.recv(size - len(data))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    return data


@pytest.mark.parametrize("blocked", [UP, DOWN])
def test_a_blocked_direction_holds_bytes_back_until_the_link_heals(echoed_link, blocked):
    network, link, client = echoed_link
    client.sendall(b"before")
    assert received(client, 6, 5) == b"before"
    network.impair([link], frozenset({blocked}))
    client.sendall(b"during")
    assert received(client, 6, 0.5) == b""
    network.heal()
    assert received(client, 6, 5) == b"during"


def test_a_slowed_link_delays_but_delivers(echoed_link):
    network, link, client = echoed_link
    network.impair([link], frozenset(), delay_s=0.3)
    client.sendall(b"slow")
    assert received(client, 4, 0.2) == b""
    assert received(client, 4, 5) == b"slow"


def test_each_broker_has_links_of_its_own_so_it_can_be_cut_off_alone():
    network = Network(free_base_port(), replicas=3, controllers=2)
    try:
        sets = dict(assignment.split("=", 1) for assignment in network.broker_sets())
        assert [sets[f"{i}:brokerIP2"] for i in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        controller_proxies = [sets[f"{i}:controllerAddr"].split(";") for i in range(3)]
        assert all(len(proxies) == 2 for proxies in controller_proxies)
        assert len({proxy for proxies in controller_proxies for proxy in proxies}) == 6
    finally:
        network.close()


def test_a_corrupting_link_flips_one_byte_in_a_chunk_and_keeps_the_length(echoed_link):
    network, link, client = echoed_link
    network.impair([link], frozenset(), corrupt_rate=1.0, seed=7)
    sent = bytes(range(200))
    client.sendall(sent)
    echoed = received(client, len(sent), 5)
    assert len(echoed) == len(sent) and echoed != sent  # one flip each way, unless they cancel out
    network.heal()
    client.sendall(b"whole")
    assert received(client, 5, 5) == b"whole"
