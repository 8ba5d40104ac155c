"""The name server process: the route registry behind quorumq's NameServer service and the v5
QueryRoute on one port, the loop that drops silent brokers, and the metrics endpoint."""

import asyncio
import logging

from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq import limits
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.config import Config
from quorumq.listen import grpc_server
from quorumq.metrics import Exporter, RpcLatency, enabled
from quorumq.namesrv.service import (
    NAMESRV_BOUNDS,
    NameServerService,
    RouteOnlyMessagingService,
    collect,
    expire_loop,
)
from quorumq.process import run, until_signalled
from quorumq.protocol.authentication import access_checks, configured_principals
from quorumq.protocol.routes import RouteRegistry
from quorumq.protocol.v5 import REQUEST_BOUNDS

log = logging.getLogger("quorumq.namesrv")


async def serve(config: Config) -> None:
    clock = Clock()
    registry = RouteRegistry(not_active_timeout_ms=config["brokerNotActiveTimeoutMillis"])
    address = f"{config['bindAddress']}:{config['listenPort']}"
    rpc = RpcLatency(clock) if enabled(config) else None
    service = NameServerService(registry, clock, configured_principals(config))
    checks = access_checks(config, clock, lambda: service.principals)
    server = grpc_server(address, options=[("grpc.max_receive_message_length", limits.REGISTRATION_BYTES_MAX)],
                         interceptors=[rpc] if rpc is not None else [],
                         bounds={**REQUEST_BOUNDS, **NAMESRV_BOUNDS},
                         config=config, clock=clock, authentication=checks.authentication,
                         authorization=checks.authorization)
    exporter = Exporter(config, lambda: collect(registry, rpc, address)) if rpc is not None else None
    pb_grpc.add_NameServerServicer_to_server(service, server)
    v5_grpc.add_MessagingServiceServicer_to_server(RouteOnlyMessagingService(registry), server)
    await server.start()
    if exporter is not None:
        await exporter.start()
    log.info("name server listening on %s", address)
    expiry = asyncio.create_task(expire_loop(registry, clock, config["scanNotActiveBrokerInterval"] / 1000))
    await until_signalled()
    expiry.cancel()
    await server.stop(grace=1.0)
    if exporter is not None:
        await exporter.stop()
    log.info("name server stopped")


def main(config: Config) -> int:
    return run(serve, config)
