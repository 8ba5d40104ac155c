"""The controller process: the Controller service on its port, its ZooKeeper session, the loops
that keep leadership and scan for dead brokers, and the metrics endpoint."""

import asyncio
import logging

from kazoo.client import KazooClient

from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.config import Config
from quorumq.controller.metrics import collect
from quorumq.controller.service import SERVER_OPTIONS, Controller
from quorumq.listen import grpc_server
from quorumq.metrics import Exporter
from quorumq.process import run, until_signalled
from quorumq.protocol.authentication import access_checks, configured_principals

log = logging.getLogger("quorumq.controller")


async def serve(config: Config) -> None:
    zookeeper = KazooClient(hosts=config["zookeeperAddress"], timeout=config["zookeeperSessionTimeoutMillis"] / 1000)
    controller = Controller(config, zookeeper, Clock())
    # Before ZooKeeper: a taken port ends it with no session open.
    principals = configured_principals(config)  # a controller knows the config's users alone
    checks = access_checks(config, controller.clock, lambda: principals)
    server = grpc_server(controller.address, SERVER_OPTIONS, config=config, clock=controller.clock,
                         authentication=checks.authentication, authorization=checks.authorization)
    # Keeps retrying in the background when ZooKeeper is not up yet; the controller then leads no one.
    await asyncio.to_thread(zookeeper.start_async)
    pb_grpc.add_ControllerServicer_to_server(controller, server)
    await server.start()
    exporter = None
    if controller.metrics is not None:
        exporter = Exporter(config, lambda: collect(controller, controller.clock.monotonic_ms()))
        await exporter.start()
    log.info("controller listening on %s, ZooKeeper %s%s", controller.address, config["zookeeperAddress"],
             config["zookeeperRoot"])
    tasks = [asyncio.create_task(controller.keep_leadership()), asyncio.create_task(controller.scan())]
    await until_signalled()
    log.info("controller stopping")
    for task in tasks:
        task.cancel()
    await server.stop(grace=1.0)
    if exporter is not None:
        await exporter.stop()
    await asyncio.to_thread(zookeeper.stop)
    await asyncio.to_thread(zookeeper.close)
    log.info("controller stopped")


def main(config: Config) -> int:
    return run(serve, config)
