"""The name server process: the route registry behind quorumq's NameServer service, plus the v5
QueryRoute so a RocketMQ client's access point can be the name server."""

import asyncio
import logging
import signal

import grpc
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.config import Config
from quorumq.endpoint import v5
from quorumq.endpoint.messages import topic_name
from quorumq.errors import QuorumqError
from quorumq.listen import grpc_server
from quorumq.metrics import Exporter, Families, RpcLatency, enabled
from quorumq.namesrv.registry import RouteRegistry, client_route

log = logging.getLogger("quorumq.namesrv")


class NameServerService(pb_grpc.NameServerServicer):
    def __init__(self, registry: RouteRegistry, clock: Clock) -> None:
        self.registry = registry
        self.clock = clock

    async def RegisterBroker(self, request, context):
        return self.registry.register(request, self.clock.monotonic_ms())

    async def UnregisterBroker(self, request, context):
        self.registry.unregister(request.cluster, request.broker_name, request.broker_id)
        log.info("broker %s/%s id %d unregistered", request.cluster, request.broker_name, request.broker_id)
        return pb.Empty()

    async def GetRoute(self, request, context):
        route = self.registry.route(request.topic)
        if route is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"TOPIC_NOT_FOUND: no route for topic {request.topic}")
        return route

    async def GetClusterInfo(self, request, context):
        return self.registry.cluster_info(self.clock.monotonic_ms())

    async def GetBrokerMemberGroup(self, request, context):
        return self.registry.member_group(request.cluster, request.broker_name)

    async def GetTopicList(self, request, context):
        return pb.TopicList(topics=self.registry.topic_list())

    async def DeleteTopic(self, request, context):
        self.registry.delete_topic(request.topic)
        return pb.Empty()


class RouteOnlyMessagingService(v5.UnservedMessagingService):
    """The v5 surface of the name server: QueryRoute only; the client sends everything else but
    RecallMessage to the brokers named in the route (grpc-client.md section 1)."""

    serving = "the name server, which answers QueryRoute only"

    def __init__(self, registry: RouteRegistry) -> None:
        self.registry = registry

    async def QueryRoute(self, request, context):
        try:
            topic = topic_name(request.topic)
        except QuorumqError as exc:
            return v5s.QueryRouteResponse(status=v5.error_status(exc))
        return v5.route_response(client_route(self.registry.route(topic)), request.topic)


async def _expire_loop(registry: RouteRegistry, clock: Clock, interval_s: float) -> None:
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


async def serve(config: Config) -> None:
    clock = Clock()
    registry = RouteRegistry(not_active_timeout_ms=config["brokerNotActiveTimeoutMillis"])
    address = f"{config['bindAddress']}:{config['listenPort']}"
    rpc = RpcLatency() if enabled(config) else None
    server = grpc_server(address, interceptors=[rpc] if rpc is not None else [])
    exporter = Exporter(config, lambda: collect(registry, rpc, address)) if rpc is not None else None
    pb_grpc.add_NameServerServicer_to_server(NameServerService(registry, clock), server)
    v5_grpc.add_MessagingServiceServicer_to_server(RouteOnlyMessagingService(registry), server)
    await server.start()
    if exporter is not None:
        await exporter.start()
    log.info("name server listening on %s", address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    expiry = asyncio.create_task(_expire_loop(registry, clock, config["scanNotActiveBrokerInterval"] / 1000))
    await stop.wait()
    expiry.cancel()
    await server.stop(grace=1.0)
    if exporter is not None:
        await exporter.stop()
    log.info("name server stopped")


def main(config: Config) -> int:
    asyncio.run(serve(config))
    return 0
