"""The process layer: each module wires one server's parts into a process (ports, loops, metrics,
signals). Nothing below imports it; `cli/` starts it."""

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from quorumq.config import Config
from quorumq.tls import use_member_tls


async def until_signalled() -> None:
    """Return on SIGTERM or SIGINT, the way `quorumq up` and the tests stop a server."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


def run(serve: Callable[[Config], Coroutine[Any, Any, None]], config: Config) -> int:
    """Serve on uvloop's event loop: a unary gRPC call costs grpc.aio about a fifth less CPU
    there than on asyncio's own loop (docs/benchmarks.md, bench_rpc_servers)."""
    use_member_tls(config)
    uvloop.run(serve(config))
    return 0
