"""`quorumq replicator run`: replicate topics from a primary cluster to a standby on Spark.

The process is the Spark driver (local[*] unless --spark-master says otherwise); it prints progress
to stdout. Stopping it and starting it again with the same --checkpoint resumes where the last
committed micro-batch ended: at least once, at most one batch sent twice per job (none with --dedupe
while the replicator is the only writer of the standby's queues).
"""

import argparse

from quorumq.replicator.options import add_arguments


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("replicator", help="cross-cluster replication on Spark", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run_parser = actions.add_parser("run", help="run the replicator's Spark driver in the foreground")
    add_arguments(run_parser)
    run_parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: Spark is needed only by this command.
    from quorumq.replicator.app import run_with_options

    return run_with_options(args)
