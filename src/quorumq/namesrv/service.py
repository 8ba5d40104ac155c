"""The name server's services: quorumq's NameServer service over the route registry, plus the v5
QueryRoute so a RocketMQ client's access point can be the name server."""

import asyncio
import dataclasses
import logging
import re

import grpc
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq import limits
from quorumq.client.routes import open_channel
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.auth import UserType
from quorumq.core.message_rules import check_name, quoted
from quorumq.core.timers import decode_recall_handle
from quorumq.errors import Error, QuorumqError
from quorumq.grpc_errors import abort
from quorumq.listen import RequestBound
from quorumq.metrics import Families, RpcLatency
from quorumq.protocol import v5
from quorumq.protocol.access import Principals, access_from_pb
from quorumq.protocol.constants import MASTER_ID
from quorumq.protocol.routes import RouteRegistry, client_route

log = logging.getLogger("quorumq.namesrv")

# What the name server's own requests may hold before they are parsed (listen.py). A registration's
# topics are counted: protobuf builds an object of about 75 bytes for each, and an entry takes 2
# bytes on the wire, so the largest registration gRPC takes (REGISTRATION_BYTES_MAX) would parse into
# 4.6M topics (+288 MiB measured) before the registry counts them. Past REGISTRATION_TOPICS_MAX it is
# refused unparsed with the registry's own error.
NAMESRV_BOUNDS = {
    f"/{pb.DESCRIPTOR.services_by_name['NameServer'].full_name}/RegisterBroker": RequestBound(
        None, pb.BrokerRegistration.TOPICS_FIELD_NUMBER, limits.REGISTRATION_TOPICS_MAX, "topics", entries_min=0,
        entries_error=Error.TOO_MANY_REQUESTS),
}
# A broker's advertised addresses: host:port, the host of printable ASCII without spaces (a name, an
# IPv4 address or a bracketed IPv6 one), so that nothing a registration carries reaches the log or a
# route unescaped.
_ADDRESS = re.compile(rf"[!-~]{{1,{limits.HOST_LENGTH_MAX}}}:([0-9]{{1,5}})")


class NameServerService(pb_grpc.NameServerServicer):
    def __init__(self, registry: RouteRegistry, clock: Clock, configured: Principals) -> None:
        self.registry = registry
        self.clock = clock
        self._configured = configured  # the config's users
        self._principals, self._principals_at = configured, -1  # and the registry's changes they are of

    @property
    def principals(self) -> Principals:
        """Who may call: the config's users, and the users and rules the masters registered (the
        name server checks v5 clients' route queries with them), of every cluster it serves, each a
        Normal user here: a Super user of one cluster is not one of the others. Where masters
        disagree (a change that reached some of them), the one heard from last wins."""
        if self._principals_at != self.registry.changes:
            users, rules = {}, {}
            masters = sorted((entry for entry in self.registry.brokers.values()
                              if entry.registration.broker_id == MASTER_ID), key=lambda entry: entry.heard_ms)
            for entry in masters:
                try:
                    registered_users, registered_rules = access_from_pb(entry.registration.access)
                except QuorumqError as error:  # a member's, so never seen: skipped, the others serve
                    log.warning("users and rules of %s not taken: %s", entry.registration.address, error)
                    continue
                users.update({name: dataclasses.replace(user, user_type=UserType.NORMAL)
                              for name, user in registered_users.items()})
                rules.update(registered_rules)
            configured = self._configured
            self._principals = Principals({**users, **configured.users}, rules, configured.inner_access_key)
            self._principals_at = self.registry.changes
        return self._principals

    async def RegisterBroker(self, request, context):
        await _check_names(request, context)
        await _check_contents(request, context)
        try:
            return self.registry.register(request, self.clock.monotonic_ms())
        except QuorumqError as error:  # past a total: the broker's earlier registration, if any, stays
            log.warning("registration from %s refused: %s", context.peer(), error)
            await abort(context, error)

    async def UnregisterBroker(self, request, context):
        await _check_names(request, context)
        self.registry.unregister(request.cluster, request.broker_name, request.broker_id)
        log.info("broker %s/%s id %d unregistered", request.cluster, request.broker_name, request.broker_id)
        return pb.Empty()

    async def GetRoute(self, request, context):
        route = self.registry.route(request.topic)
        if route is None:
            await abort(context, QuorumqError(Error.TOPIC_NOT_FOUND, f"no route for topic {request.topic}"))
        return route

    async def GetClusterInfo(self, request, context):
        return self.registry.cluster_info(self.clock.monotonic_ms())

    async def GetBrokerMemberGroup(self, request, context):
        return self.registry.member_group(request.cluster, request.broker_name)

    async def GetTopicList(self, request, context):
        topics = self.registry.topic_types()
        return pb.TopicList(topics=[name for name, _ in topics], message_types=[kind for _, kind in topics])

    async def DeleteTopic(self, request, context):
        self.registry.delete_topic(request.topic)
        return pb.Empty()


async def _check_names(registration: pb.BrokerRegistration, context) -> None:
    """Cluster and broker names keep the topics' rule, as in RocketMQ, where each is also a topic's
    name: then no name the log or a route shows carries control characters or spaces."""
    try:
        check_name(registration.cluster, Error.BAD_REQUEST, "cluster name")
        check_name(registration.broker_name, Error.BAD_REQUEST, "broker name")
    except QuorumqError as error:
        await abort(context, error)


async def _check_contents(registration: pb.BrokerRegistration, context) -> None:
    """The addresses (host:port) and topic names (the name rule) of a registration, which a
    broker's own always keep (it creates no topic outside the rule)."""
    try:
        _check_address(registration.address, "address")
        if registration.ha_address:
            _check_address(registration.ha_address, "HA address")
        for topic in registration.topics:
            check_name(topic.name, Error.ILLEGAL_TOPIC, "topic")
    except QuorumqError as error:
        log.warning("registration from %s refused: %s", context.peer(), error)
        await abort(context, error)


def _check_address(address: str, what: str) -> None:
    port = _ADDRESS.fullmatch(address)
    if port is None or not 0 < int(port[1]) < 65536:
        raise QuorumqError(Error.BAD_REQUEST, f"broker {what} {quoted(address)} must be host:port, the host "
                                              f"1..{limits.HOST_LENGTH_MAX} printable characters without spaces")


class RouteOnlyMessagingService(v5.UnservedMessagingService):
    """The v5 surface of the name server: QueryRoute, and RecallMessage passed on to the broker
    group its handle names; the client sends everything else to the brokers named in the route
    (grpc-client.md section 1)."""

    serving = "the name server, which answers QueryRoute and RecallMessage only"

    def __init__(self, registry: RouteRegistry) -> None:
        self.registry = registry
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def RecallMessage(self, request, context):
        try:
            topic = v5.topic_name(request.topic)
            _, broker_name, _, _ = decode_recall_handle(request.recall_handle)
            route = self.registry.route(topic)
            data = next((data for data in route.brokers if data.broker_name == broker_name), None) if route else None
            if data is None or data.serving_id not in data.addresses:
                raise QuorumqError(Error.BROKER_NOT_FOUND, f"no broker {broker_name} serves topic {topic}")
            address = data.addresses[data.serving_id]
            if address not in self._channels:
                self._channels[address] = open_channel(address)
            stub = v5_grpc.MessagingServiceStub(self._channels[address])
            return await stub.RecallMessage(request, timeout=context.time_remaining(),
                                            metadata=v5.forwarded_metadata(context))
        except QuorumqError as exc:
            return v5s.RecallMessageResponse(status=v5.error_status(exc))
        except grpc.aio.AioRpcError as exc:
            return v5s.RecallMessageResponse(status=v5.status(
                Error.SERVICE_NOT_AVAILABLE, f"broker {broker_name} did not answer: {exc.code().name}"))

    async def QueryRoute(self, request, context):
        try:
            topic = v5.topic_name(request.topic)
        except QuorumqError as exc:
            return v5s.QueryRouteResponse(status=v5.error_status(exc))
        return v5.route_response(client_route(self.registry.route(topic)), request.topic)


async def expire_loop(registry: RouteRegistry, clock: Clock, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        for entry in registry.expire(clock.monotonic_ms()):
            reg = entry.registration
            log.warning("broker %s/%s id %d at %s not heard from for %d ms: dropped", reg.cluster,
                        reg.broker_name, reg.broker_id, reg.address, registry.not_active_timeout_ms)


def collect(registry: RouteRegistry, rpc: RpcLatency, address: str):
    families = Families({"node_type": "namesrv", "node_id": address})
    yield rpc.family(families)
    brokers: dict[str, int] = {}
    for cluster, _, _ in registry.brokers:
        brokers[cluster] = brokers.get(cluster, 0) + 1
    yield families.gauge("quorumq_namesrv_brokers", "brokers registered, by cluster", brokers, ["cluster"])
    yield families.gauge("rocketmq_topic_number", "topics routed", len(registry.topic_list()))
