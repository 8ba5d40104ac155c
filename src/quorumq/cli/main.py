"""The `quorumq` command: run a name server, a broker, a controller or a proxy, a local cluster
(`up`), admin commands, or the dashboard."""

import argparse
import logging
import sys
from pathlib import Path

from quorumq import __version__
from quorumq.cli import admin, dashboard, replicator, up
from quorumq.clock import Clock, ClockLogFormatter
from quorumq.config import Config, Kind
from quorumq.errors import QuorumqError

EXIT_USAGE = 2  # as argparse: the command line or a config file is wrong
EXIT_FAILED = 1


def serve(kind: Kind, config_path: Path) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ClockLogFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", Clock()))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    try:
        config = Config.load(kind, config_path)
    except (QuorumqError, OSError) as error:
        print(f"quorumq {kind.value}: {error}", file=sys.stderr)
        return EXIT_USAGE
    # Imported here so that admin commands do not load the servers (and the store) they never run.
    if kind is Kind.NAMESRV:
        from quorumq.process.namesrv import main as server_main
    elif kind is Kind.CONTROLLER:
        from quorumq.process.controller import main as server_main
    elif kind is Kind.PROXY:
        from quorumq.process.proxy import main as server_main
    else:
        from quorumq.process.broker import main as server_main
    try:
        return server_main(config)
    except QuorumqError as error:  # one that ends the server, e.g. a taken port or a store in use: one line
        print(f"quorumq {kind.value}: {error}", file=sys.stderr)
        return EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quorumq", description=__doc__)
    parser.add_argument("--version", action="version", version=f"quorumq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for kind in (Kind.NAMESRV, Kind.BROKER, Kind.CONTROLLER, Kind.PROXY):
        server = commands.add_parser(kind.value, help=f"run a {kind.value} until SIGTERM or SIGINT")
        server.add_argument("-c", "--config", required=True, type=Path, help="Java-properties config file")
        server.set_defaults(run=lambda args, kind=kind: serve(kind, args.config))
    up.add_parser(commands)
    admin.add_parser(commands)
    replicator.add_parser(commands)
    dashboard.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
