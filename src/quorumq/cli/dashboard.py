"""`quorumq dashboard`: serve a live web page over a cluster (src/quorumq/dashboard)."""

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from quorumq.core.auth import Credentials
from quorumq.errors import QuorumqError

PORT_DEFAULT = 8080
EXIT_FAILED = 1
# The credentials every call of the dashboard (and of `quorumq admin`) is signed with, for a
# cluster with authenticationEnabled (`quorumq up` passes its innerClientAuthenticationCredentials).
ACCESS_KEY_ENV, SECRET_KEY_ENV = "QUORUMQ_ACCESS_KEY", "QUORUMQ_SECRET_KEY"


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from quorumq.dashboard.server import serve  # imported here: other commands never load it

    controllers = [address for address in (args.controllers or "").split(";") if address]
    access_key = os.environ.get(ACCESS_KEY_ENV, "")
    credentials = Credentials(access_key, os.environ.get(SECRET_KEY_ENV, "")) if access_key else None

    async def main() -> None:
        task = asyncio.create_task(serve(args.namesrv, controllers, args.replicator, args.host, args.port,
                                         credentials))
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(main())
    except QuorumqError as error:  # a taken port: one line
        print(f"quorumq dashboard: {error}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("dashboard", help="serve a live web page over a cluster", description=__doc__)
    parser.add_argument("-n", "--namesrv", required=True, help="the name server's address (host:port)")
    parser.add_argument("-a", "--controllers", help="controller addresses, separated by ; (controller mode)")
    parser.add_argument("--replicator", type=Path, help="a replicator's --checkpoint directory, to show its status")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=PORT_DEFAULT, help="the port to listen on (default %(default)s)")
    parser.set_defaults(run=run)
