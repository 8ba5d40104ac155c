"""An empty RocketMQ 5 gRPC endpoint: the least a server can do for the official Python client's Producer.

It answers QueryRoute (one READ_WRITE queue whose broker is the address the client reached), Telemetry
(echoes the client's settings with status OK and a max body size), Heartbeat and NotifyClientTermination
(OK), and SendMessage (OK, one entry echoing the message id), plus quorumq's MessageWriter.SendBatch
(SEND_OK with the next queue offsets). It stores nothing. The benchmarks run the official client and
quorumq's client against it to show each client's own ceiling, the round trip a broker adds to.

    python bench/fake_v5_server.py --port 23990
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal

import grpc
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc

OK = d.Status(code=d.Code.OK, message="OK")
MAX_BODY = 4 * 1024 * 1024


class FakeMessagingService(sg.MessagingServiceServicer):
    def __init__(self) -> None:
        self._offsets = itertools.count()

    async def QueryRoute(self, request, context):
        broker = d.Broker(name="fake-broker", id=0, endpoints=request.endpoints)
        queue = d.MessageQueue(topic=request.topic, id=0, permission=d.Permission.READ_WRITE, broker=broker,
                               accept_message_types=[d.MessageType.NORMAL])
        return s.QueryRouteResponse(status=OK, message_queues=[queue])

    async def Heartbeat(self, request, context):
        return s.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(self, request, context):
        return s.NotifyClientTerminationResponse(status=OK)

    async def SendMessage(self, request, context):
        entries = [s.SendResultEntry(status=OK, message_id=m.system_properties.message_id,
                                     offset=next(self._offsets)) for m in request.messages]
        return s.SendMessageResponse(status=OK, entries=entries)

    async def Telemetry(self, request_iterator, context):
        async for command in request_iterator:
            if not command.HasField("settings"):
                continue
            settings = d.Settings()
            settings.CopyFrom(command.settings)
            if settings.HasField("publishing"):
                settings.publishing.max_body_size = MAX_BODY
                settings.publishing.validate_message_type = True
            settings.metric.on = False
            yield s.TelemetryCommand(status=OK, settings=settings)


class EmptyWriter(pb_grpc.MessageWriterServicer):
    """Stores nothing: answers SEND_OK with the next queue offsets."""

    def __init__(self) -> None:
        self.next_offset = 0

    async def SendBatch(self, request, context):
        first, self.next_offset = self.next_offset, self.next_offset + request.count
        return pb.SendBatchResponse(status="SEND_OK", first_queue_offset=first, count=request.count)


async def serve(host: str, port: int) -> None:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_BODY + 1024 * 1024)])
    sg.add_MessagingServiceServicer_to_server(FakeMessagingService(), server)
    pb_grpc.add_MessageWriterServicer_to_server(EmptyWriter(), server)
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
