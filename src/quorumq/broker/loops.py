"""The broker's standing loops: registration with the name servers and route look-ups, a master
counting its live replicas (the name server's broker member group), a slave finding its master
through its registration and copying the master's topics and consumer positions, and periodic
chores."""

import asyncio
import logging

import grpc

from quorumq.broker.broker import Broker
from quorumq.client.routes import open_channel
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.quorum import BrokerRole, alive_replicas_in_group
from quorumq.errors import QuorumqError
from quorumq.protocol.routes import RouteRegistry, client_route

log = logging.getLogger("quorumq.broker")

NAMESRV_CALL_TIMEOUT_S = 3.0
MASTER_CALL_TIMEOUT_S = 3.0
REGISTER_RETRY_INTERVAL_S = 1.0  # after a failed registration, or for a slave that lacks its master
SYNC_METADATA_INTERVAL_S = 3.0  # a slave copies its master's topics and consumer positions this often


class NameServerLink:
    """The broker's view of its name servers: registration and route look-ups."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.addresses = [address for address in broker.config["namesrvAddr"].split(";") if address]
        credentials = broker.config.inner_credentials()
        self.stubs = [pb_grpc.NameServerStub(open_channel(address, credentials=credentials))
                      for address in self.addresses]
        # Registrations started and finished, for `publish`; the lock lets one run at a time.
        self._started = self._finished = 0
        self._answered = False  # whether every name server answered the last one finished
        self._publishing = asyncio.Lock()
        self._stale = set(self.addresses)  # name servers the next registration gives every topic

    async def publish(self) -> bool:
        """Register so that the name servers show every change made before this call; whether every
        name server answered. Callers share registrations (creating topics at once, many wait on one):
        a caller waits for the first registration that starts after its call; the lock queues
        callers in order."""
        wanted = self._started + 1
        async with self._publishing:
            if self._finished < wanted:
                self._started += 1
                self._answered = await self.register()
                self._finished = self._started
            return self._answered

    async def register(self) -> bool:
        """Register with every name server; a slave learns its master from the answers. A name
        server that holds this broker's last registration gets the topics changed since (an
        increment, as RocketMQ's registerIncrementBrokerData: one topic created costs O(1), where
        every topic each time cost O(N^2) for N topics created); one that failed, lost it or asks
        gets every topic. Returns whether every name server answered."""
        if self.broker.controller_mode and not self.broker.controller_id:
            return False  # no id from the controller yet: registering now would claim the master's id 0
        changed = self.broker.topics.take_changes()
        if changed is None:
            self._stale.update(self.addresses)
        increment = self.broker.registration(changed) if changed is not None else None
        full = None
        answered = 0
        for address, stub in zip(self.addresses, self.stubs):
            try:
                reply = None
                if address not in self._stale and increment is not None:
                    reply = await stub.RegisterBroker(increment, timeout=NAMESRV_CALL_TIMEOUT_S)
                if reply is None or reply.needs_all_topics:
                    if full is None:
                        full = self.broker.registration()
                    reply = await stub.RegisterBroker(full, timeout=NAMESRV_CALL_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                self._stale.add(address)
                log.warning("registration with name server %s failed: %s", address, exc.details())
                continue
            self._stale.discard(address)
            answered += 1
            # In controller mode the controller names the master; the name server only routes.
            if self.broker.role is BrokerRole.SLAVE and reply.master_ha_address and not self.broker.controller_mode:
                self.broker.follow(reply.master_address, reply.master_ha_address)
        return answered == len(self.stubs)

    async def unregister(self) -> None:
        for stub in self.stubs:
            try:
                await stub.UnregisterBroker(self.broker.registration(), timeout=NAMESRV_CALL_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                pass

    async def route(self, topic: str) -> pb.TopicRoute | None:
        """The name server's route as clients get it (an acting slave under the master's id);
        without one answering, this broker's own view of the topic."""
        for stub in self.stubs:
            try:
                return client_route(await stub.GetRoute(pb.TopicRequest(topic=topic),
                                                        timeout=NAMESRV_CALL_TIMEOUT_S))
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    return None
        return client_route(self._local_route(topic))

    def _local_route(self, topic: str) -> pb.TopicRoute | None:
        """This broker's own route for a topic, built by the name server's rules."""
        registry = RouteRegistry(not_active_timeout_ms=0)
        registry.register(self.broker.registration(), now_ms=0)
        return registry.route(topic)

    async def keep_registered(self) -> None:
        """Register every period with every topic, and at once whenever topics change with those
        changed; after a failed registration (a name server still starting), and while a slave does
        not know its master, soon."""
        full_due_ms = 0
        while True:
            self.broker.topics_changed.clear()
            period_s = self.broker.config["registerNameServerPeriod"] / 1000
            if self.broker.clock.monotonic_ms() >= full_due_ms:  # every topic each period, whatever was lost
                self._stale.update(self.addresses)
                full_due_ms = self.broker.clock.monotonic_ms() + int(period_s * 1000)
            registered = await self.publish()
            if not registered or self.broker.role is BrokerRole.SLAVE and not self.broker.master_address:
                period_s = min(period_s, REGISTER_RETRY_INTERVAL_S)
            try:
                await asyncio.wait_for(self.broker.topics_changed.wait(), period_s)
            except TimeoutError:
                pass

    async def keep_member_count(self) -> None:
        """A master's alive-replica count: the name server's broker member group (spec 1.3)."""
        config = self.broker.config
        request = pb.MemberGroupRequest(cluster=config["brokerClusterName"], broker_name=config["brokerName"])
        while True:
            await asyncio.sleep(config["syncBrokerMemberGroupPeriod"] / 1000)
            for stub in self.stubs:
                try:
                    group = await stub.GetBrokerMemberGroup(request, timeout=NAMESRV_CALL_TIMEOUT_S)
                except grpc.aio.AioRpcError:
                    continue
                alive = alive_replicas_in_group(group.addresses.keys(), config["brokerId"])
                if alive != self.broker.alive_replicas:
                    log.info("alive replicas: %d (members %s)", alive, sorted(group.addresses))
                self.broker.alive_replicas = alive
                break


async def copy_master_metadata(broker: Broker) -> None:
    """A slave mirrors its master's topics and consumer positions, as RocketMQ's slaves do. It asks
    again as soon as it has applied an answer and the master answers when a topic update or a
    commit changed something (else after SYNC_METADATA_INTERVAL_S): changes reach the slaves at
    once, and the version applied tells a controller-mode master that a change is safe
    (MetadataSync.replicated, broker/metadata.py)."""
    channels: dict[str, grpc.aio.Channel] = {}
    applied = ("", "", 0)  # the master address, incarnation and version last applied
    while True:
        address = master_metadata_address(broker)
        if not address or broker.role is not BrokerRole.SLAVE:  # a controller-mode broker may be master now
            await asyncio.sleep(SYNC_METADATA_INTERVAL_S)
            continue
        if address not in channels:
            # One answer carries every topic and group (at GROUPS_MAX, 8 MB of names: past gRPC's
            # default 4 MiB); the master's send limit bounds it.
            channels[address] = open_channel(address, ("grpc.max_receive_message_length", -1),
                                             credentials=broker.config.inner_credentials())
        _, incarnation, version = applied if applied[0] == address else ("", "", 0)
        request = pb.MetadataRequest(broker_id=broker.replica_id, incarnation=incarnation, applied_version=version,
                                     wait_ms=int(SYNC_METADATA_INTERVAL_S * 1000))
        try:
            metadata = await pb_grpc.BrokerAdminStub(channels[address]).GetMetadata(
                request, timeout=MASTER_CALL_TIMEOUT_S + SYNC_METADATA_INTERVAL_S)
        except grpc.aio.AioRpcError as exc:
            log.debug("copying the master's metadata failed: %s", exc.details())
            await asyncio.sleep(SYNC_METADATA_INTERVAL_S)
            continue
        if broker.role is not BrokerRole.SLAVE or master_metadata_address(broker) != address:
            continue  # the role moved while the poll was out: another master's positions are not ours
        try:
            broker.adopt_metadata(metadata)
        except (QuorumqError, OSError) as exc:  # not applied, so not confirmed: the master's commits wait
            log.error("applying the master's metadata failed: %s", exc)
            await asyncio.sleep(SYNC_METADATA_INTERVAL_S)
            continue
        applied = (address, metadata.incarnation, metadata.version)


def master_metadata_address(broker: Broker) -> str:
    """Where a slave copies its master's metadata: the master's gRPC port at the host it replicates
    from (the master's brokerIP2, by default its brokerIP1: the host the members reach it at, so
    both member links can be routed apart from the clients'); empty until it follows a master."""
    if broker.slave is None or not broker.master_address:
        return ""
    host, _ = broker.slave.master_address
    return f"{host}:{broker.master_address.rpartition(':')[2]}"


async def every(interval_ms, action) -> None:
    """Run `action` forever, `interval_ms()` apart; a failure is logged and retried next time."""
    while True:
        await asyncio.sleep(interval_ms() / 1000)
        try:
            action()
        except QuorumqError as exc:  # a known failure (a full disk): one line, not a traceback
            log.error("%s failed: %s", action.__name__, exc)
        except Exception:
            log.exception("%s failed", action.__name__)
