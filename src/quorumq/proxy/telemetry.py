"""A client's Telemetry stream with a proxy, and a producer's transaction checks through it.

The proxy answers each settings command itself. A broker asks a live producer of a half message's
topic to decide it over that producer's own Telemetry stream (broker/transactions.py); behind a
proxy the producer has a stream with the proxy alone. So for a producer (settings that publish
topics) the proxy opens a stream of its own to every replica of every broker group serving those
topics, says the producer's settings there with the producer's headers (the broker checks its
signature and rights as on a direct stream), and passes on each check the broker pushes, its
transaction id prefixed with the group's name as every transaction id the proxy hands out
(core/proxy_handles.py), so that the producer's EndTransaction goes back to that group. Every
replica holds the producer, so in controller mode a newly elected master checks with it at once;
a replica's stream that ends (its broker stopped) is opened again every
limits.PROXY_TELEMETRY_REOPEN_S while the producer's lasts, with the headers of the producer's
stream (a replica that refuses them is left).
The topics are those of the producer's first settings, routed then: a broker group that takes one
of them later checks with the producer once it opens its stream again.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import grpc
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s

from quorumq import limits
from quorumq.client.routes import Channels
from quorumq.core.proxy_handles import wrap

log = logging.getLogger("quorumq.proxy")

# The replicas of the groups serving some topics: their address -> their group's name.
Replicas = Callable[[Iterable[v5.Resource]], Awaitable[dict[str, str]]]


async def serve(request_iterator, metadata: tuple[tuple[str, str], ...],
                answer: Callable[[v5.Settings], Awaitable[v5s.TelemetryCommand]], replicas: Replicas,
                channels: Channels) -> AsyncIterator[v5s.TelemetryCommand]:
    """The proxy's side of one client's Telemetry stream: `answer` to each settings command, and a
    producer's checks from the brokers; the relays end with the client's stream."""
    outbox: asyncio.Queue = asyncio.Queue()  # what goes to the client; None ends the stream
    relays: list[asyncio.Task] = []

    async def read() -> None:
        try:
            async for command in request_iterator:
                if not command.HasField("settings"):
                    continue
                reply = await answer(command.settings)
                outbox.put_nowait(reply)
                publishing = command.settings.publishing.topics
                if relays or not publishing or reply.status.code != v5.Code.OK:
                    continue
                try:
                    found = await replicas(publishing)
                except Exception as exc:  # noqa: BLE001 - no route now: the client's next settings try again
                    log.warning("a producer's transaction checks: its topics' routes: %s", exc)
                    continue
                relays.extend(asyncio.ensure_future(_relay(channels, address, broker_name, command, metadata, outbox))
                              for address, broker_name in found.items())
        finally:
            outbox.put_nowait(None)

    reader = asyncio.ensure_future(read())
    try:
        while (command := await outbox.get()) is not None:
            yield command
    finally:
        for task in (reader, *relays):
            task.cancel()
        for task in (reader, *relays):
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _relay(channels: Channels, address: str, broker_name: str, settings: v5s.TelemetryCommand,
                 metadata: tuple[tuple[str, str], ...], outbox: asyncio.Queue) -> None:
    """The producer's stream with one replica: its checks to the producer, until cancelled."""
    while True:
        call = channels.messaging(address).Telemetry(metadata=metadata)
        try:
            await call.write(settings)
            while (command := await call.read()) is not grpc.aio.EOF:
                if command.HasField("recover_orphaned_transaction_command"):
                    check = command.recover_orphaned_transaction_command
                    check.transaction_id = wrap(broker_name, check.transaction_id)
                    outbox.put_nowait(command)
                elif command.status.code != v5.Code.OK:  # the same headers would be refused again
                    log.warning("%s refused a producer's settings, so it checks no transaction with it: %s",
                                address, command.status.message)
                    return
        except grpc.aio.AioRpcError as exc:
            log.debug("the transaction checks of %s: %s %s", address, exc.code().name, exc.details())
        finally:
            call.cancel()
        await asyncio.sleep(limits.PROXY_TELEMETRY_REOPEN_S)
