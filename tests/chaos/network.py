"""TCP proxies on the links of a controller-mode broker group, for partitions and one-way, slow or
corrupting links (faults F6 and F7): this kernel has no netem and there is no iptables.

Each broker reaches each controller through a proxy of its own, and slaves replicate from a
master through the proxy on its HA address (the broker advertises it as `brokerIP2`: 127.0.0.2
and up, the proxy forwarding to the HA port on 127.0.0.1); they copy its topics and consumer
positions through another on that host at its gRPC port (clients reach it directly). A blocked
direction stops reading, so bytes wait as they would in a partitioned TCP connection, and flow
again when it heals; a connection opened while the way up is blocked waits like an unanswered SYN."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field

from quorumq.cli.up import BROKER_PORT_OFFSET, CONTROLLER_PORT_OFFSET, HOST, REPLICA_PORT_STRIDE

UP, DOWN = "up", "down"  # towards the listening side (a master, a controller), and back
CHUNK = 64 * 1024


@dataclass(eq=False)
class Link:
    """One proxy: from `listen` to `target`, its two directions blocked or delayed separately."""
    name: str
    listen: tuple[str, int]
    target: tuple[str, int]
    delay_s: float = 0.0
    corrupt_rate: float = 0.0  # the share of chunks that get one byte flipped, both ways
    rng: random.Random = field(default_factory=random.Random)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    server: asyncio.base_events.Server | None = None

    async def open(self) -> None:
        self.gates = {UP: asyncio.Event(), DOWN: asyncio.Event()}
        for gate in self.gates.values():
            gate.set()
        self.server = await asyncio.start_server(self._serve, *self.listen)
        self.listen = self.server.sockets[0].getsockname()[:2]

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        await self.gates[UP].wait()
        try:
            target_reader, target_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(self._pump(client_reader, target_writer, UP),
                             self._pump(target_reader, client_writer, DOWN))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        gate = self.gates[direction]
        try:
            while True:
                await gate.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                await gate.wait()
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if self.corrupt_rate and self.rng.random() < self.corrupt_rate:
                    data = _flip_a_byte(data, self.rng)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def set(self, blocked: frozenset[str], delay_s: float, corrupt_rate: float, seed: int) -> None:
        """Runs on the proxies' loop."""
        self.delay_s, self.corrupt_rate, self.rng = delay_s, corrupt_rate, random.Random(seed)
        for direction, gate in self.gates.items():
            gate.clear() if direction in blocked else gate.set()


def _flip_a_byte(data: bytes, rng: random.Random) -> bytes:
    position = rng.randrange(len(data))
    return data[:position] + bytes([data[position] ^ (1 << rng.randrange(8))]) + data[position + 1:]


class Network:
    """The proxies of one group: every broker's links to the controllers and to its HA port."""

    def __init__(self, base_port: int, replicas: int, controllers: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-network", daemon=True)
        self._thread.start()
        self.controller_links: dict[int, list[Link]] = {}
        self.ha_links: dict[int, Link] = {}
        self.metadata_links: dict[int, Link] = {}
        for replica in range(replicas):
            port = base_port + BROKER_PORT_OFFSET + REPLICA_PORT_STRIDE * replica
            self.controller_links[port] = [
                self._open(Link(f"broker {port} -> controller {index}", (HOST, 0),
                                (HOST, base_port + CONTROLLER_PORT_OFFSET + index)))
                for index in range(controllers)]
            member_host = f"127.0.0.{2 + replica}"
            self.ha_links[port] = self._open(Link(f"HA of broker {port}", (member_host, port + 1), (HOST, port + 1)))
            self.metadata_links[port] = self._open(Link(f"metadata of broker {port}", (member_host, port),
                                                        (HOST, port)))

    def _open(self, link: Link) -> Link:
        asyncio.run_coroutine_threadsafe(link.open(), self._loop).result(10)
        return link

    def member_hosts(self) -> list[str]:
        """The addresses the brokers advertise besides 127.0.0.1 (brokerIP2): a member's TLS
        certificate must name them, as the slaves check it against the address they dial."""
        return [link.listen[0] for link in self.ha_links.values()]

    def broker_sets(self) -> list[str]:
        """The `quorumq up --broker-set` values that route every broker's links through the proxies."""
        sets = []
        for index, port in enumerate(self.controller_links):
            addresses = ";".join(f"{host}:{p}" for host, p in (link.listen for link in self.controller_links[port]))
            sets += [f"{index}:controllerAddr={addresses}", f"{index}:brokerIP2={self.ha_links[port].listen[0]}"]
        return sets

    def links_of(self, broker_address: str, towards: str) -> list[Link]:
        """A broker's links to the `controllers`, the way its `slaves` replicate from it, or the
        way they copy its `metadata`."""
        port = int(broker_address.rpartition(":")[2])
        if towards == "controllers":
            return self.controller_links[port]
        return [(self.ha_links if towards == "slaves" else self.metadata_links)[port]]

    def impair(self, links: list[Link], blocked: frozenset[str] = frozenset({UP, DOWN}), delay_s: float = 0.0,
               corrupt_rate: float = 0.0, seed: int = 0) -> None:
        for link in links:
            self._loop.call_soon_threadsafe(link.set, blocked, delay_s, corrupt_rate, seed)

    def links(self) -> list[Link]:
        return ([link for links in self.controller_links.values() for link in links] + list(self.ha_links.values())
                + list(self.metadata_links.values()))

    def heal(self) -> None:
        self.impair(self.links(), frozenset())

    def close(self) -> None:
        """Stop listening, drop every proxied connection, end the loop's thread."""
        async def close_all():
            for link in self.links():
                link.server.close()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # ended before the loop stops: no warnings
        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
