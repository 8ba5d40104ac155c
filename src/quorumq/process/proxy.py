"""The proxy process (RocketMQ 5's proxy in cluster mode): the v5 MessagingService on
grpcServerPort in front of the brokers the name servers at namesrvAddr route to. It keeps no
state of its own, so any number of proxies can serve one cluster."""

import logging

from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from quorumq import limits
from quorumq.client.routes import Channels, Routes
from quorumq.clock import Clock
from quorumq.config import Config
from quorumq.listen import grpc_server
from quorumq.process import run, until_signalled
from quorumq.protocol.v5 import REQUEST_BOUNDS
from quorumq.proxy.service import ProxyMessagingService

log = logging.getLogger("quorumq.proxy")


async def serve(config: Config) -> None:
    address = f"{config['bindAddress']}:{config['grpcServerPort']}"
    message_limit = limits.grpc_receive_bytes(config["maxMessageSize"])
    server = grpc_server(address, options=[
        ("grpc.max_receive_message_length", message_limit),
        ("grpc.max_send_message_length", message_limit),
    ], bounds=REQUEST_BOUNDS, config=config, clock=Clock())
    channels = Channels(config.inner_credentials())
    routes = Routes(config["namesrvAddr"], channels)
    v5_grpc.add_MessagingServiceServicer_to_server(
        ProxyMessagingService(address, routes, channels, config["maxMessageSize"],
                              send_records=config.inner_credentials() is None,
                              batch_delay_s=config["batchMaxDelayMs"] / 1000), server)
    await server.start()
    log.info("proxy listening on %s, routing through the name servers at %s", address, config["namesrvAddr"])
    await until_signalled()
    log.info("proxy stopping")
    await server.stop(grace=1.0)
    await channels.close()
    log.info("proxy stopped")


def main(config: Config) -> int:
    return run(serve, config)
