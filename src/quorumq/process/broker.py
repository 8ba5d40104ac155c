"""The broker process: the store, the v5 endpoint and the admin service on one gRPC port, the
replication port, the metrics endpoint, plus the standing loops (broker/loops.py) that register
with the name server, flush, persist offsets, clean old files and keep replica groups together."""

import asyncio
import logging

from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq import heap, limits
from quorumq.broker.admin import BrokerAdminService
from quorumq.broker.broker import Broker
from quorumq.broker.controller_link import ControllerLink
from quorumq.broker.loops import NameServerLink, copy_master_metadata, every
from quorumq.broker.metrics import collect, sample_degraded
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.config import Config
from quorumq.core.quorum import BrokerRole
from quorumq.endpoint.forwarding import ForwardingMessagingService
from quorumq.endpoint.messaging import MessagingService
from quorumq.endpoint.reader import MessageReaderService
from quorumq.endpoint.writer import MessageWriterService
from quorumq.listen import grpc_server
from quorumq.metrics import Exporter
from quorumq.process import run, until_signalled
from quorumq.protocol.authentication import access_checks
from quorumq.protocol.v5 import REQUEST_BOUNDS

log = logging.getLogger("quorumq.broker")


async def serve(config: Config) -> None:
    heap.keep_freed_memory()
    clock = Clock()
    address = f"{config['bindAddress']}:{config['listenPort']}"
    broker = Broker(config, clock)
    checks = access_checks(config, clock, lambda: broker.access.principals, config["brokerClusterName"])
    # Bound before the store's recovery, so that a taken port is said at once. gRPC's limits follow
    # maxMessageSize as the broker starts: a live change takes effect on the next start.
    message_limit = limits.grpc_receive_bytes(config["maxMessageSize"])
    server = grpc_server(address, options=[
        ("grpc.max_receive_message_length", message_limit),
        ("grpc.max_send_message_length", message_limit),
    ], interceptors=[broker.metrics.rpc] if broker.metrics is not None else [], bounds=REQUEST_BOUNDS,
        config=config, clock=clock, authentication=checks.authentication, authorization=checks.authorization)
    broker.open()
    namesrv = NameServerLink(broker)
    # In controller mode every replica takes the official client's requests for the master.
    messaging = (ForwardingMessagingService if broker.controller_mode else MessagingService)(broker, namesrv.route)
    v5_grpc.add_MessagingServiceServicer_to_server(messaging, server)
    pb_grpc.add_BrokerAdminServicer_to_server(BrokerAdminService(broker, namesrv.publish), server)
    pb_grpc.add_MessageReaderServicer_to_server(MessageReaderService(broker), server)
    pb_grpc.add_MessageWriterServicer_to_server(MessageWriterService(broker), server)
    await server.start()
    await broker.start()
    exporter = Exporter(config, lambda: collect(broker)) if broker.metrics is not None else None
    if exporter is not None:
        await exporter.start()
    log.info("broker %s (%s) listening on %s, advertised as %s", config["brokerName"],
             "controller mode" if broker.controller_mode else config["brokerRole"], address, broker.address)
    loops = [namesrv.keep_registered(),
             every(lambda: config["flushConsumerOffsetInterval"], broker.consumers.persist),
             every(lambda: config["cleanResourceInterval"], broker.clean_files)]
    link = None
    if broker.controller_mode:
        link = ControllerLink(broker)
        loops += [link.run(), copy_master_metadata(broker)]
    elif broker.role is BrokerRole.SLAVE:
        loops.append(copy_master_metadata(broker))
    elif config["enableSlaveActingMaster"]:
        loops.append(namesrv.keep_member_count())
    if exporter is not None:
        loops.append(sample_degraded(broker))
    tasks = [asyncio.create_task(coroutine) for coroutine in loops]
    await until_signalled()
    log.info("broker stopping")
    for task in tasks:
        task.cancel()
    if link is not None:
        await link.close()
    await namesrv.unregister()
    await server.stop(grace=1.0)
    if exporter is not None:
        await exporter.stop()
    await broker.close()
    log.info("broker stopped")


def main(config: Config) -> int:
    return run(serve, config)
