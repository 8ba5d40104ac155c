"""The replicator's options, shared by `quorumq replicator run` (cli/replicator.py) and the
spark-submit entry (replicator/app.py): one parser, one way to turn arguments into Settings."""

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from quorumq import limits
from quorumq.core.auth import Credentials, credentials_of
from quorumq.core.replicator import parse_checkpoint, parse_failure_policy
from quorumq.errors import QuorumqError

if TYPE_CHECKING:  # jobs loads the client and Spark's types: only the driver needs them
    from quorumq.replicator.jobs import Settings

T = TypeVar("T")

# The replicator's user on each cluster, when not on the command line (which ps shows).
SIDES = ("source", "target")
ACCESS_KEY_ENV = {side: f"QUORUMQ_{side.upper()}_ACCESS_KEY" for side in SIDES}
SECRET_KEY_ENV = {side: f"QUORUMQ_{side.upper()}_SECRET_KEY" for side in SIDES}


def topic_and_tags(text: str) -> tuple[str, str]:
    """TOPIC or TOPIC:TAG_EXPRESSION (tags joined by ||); ':' is never part of a topic name."""
    topic, _, tags = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"{text!r} is TOPIC or TOPIC:TAGS")
    return topic, tags or "*"


def catalogued(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argument type from a parser that raises catalogue errors: argparse prints the error's
    name and detail and exits with EXIT_USAGE."""
    def argument_type(text: str) -> T:
        try:
            return parse(text)
        except QuorumqError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return argument_type


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="access point (name server) of the primary cluster")
    parser.add_argument("--target", required=True, help="access point (name server) of the standby cluster")
    parser.add_argument("--topics", required=True, nargs="+", type=topic_and_tags, metavar="TOPIC[:TAGS]",
                        help="topics to replicate, each with an optional tag filter such as Orders:paid||refunded")
    parser.add_argument("--checkpoint", required=True, type=catalogued(lambda text: Path(parse_checkpoint(text))),
                        help="the application's checkpoint directory (one subdirectory per job, status files "
                             "beside them): a local or mounted path or a file:// URL; other URLs are refused")
    parser.add_argument("--spark-master", default=None, help="Spark master URL (default local[*])")
    parser.add_argument("--on-failure", default="fail", type=catalogued(parse_failure_policy),
                        metavar="fail|dismiss|module:function",
                        help="what happens to records the standby refuses after bounded retries (default fail)")
    parser.add_argument("--dedupe", action="store_true",
                        help="skip what a replayed batch already wrote (read from the standby queue's tail)")
    parser.add_argument("--starting", choices=("earliest", "latest"), default="latest",
                        help="where a new checkpoint starts reading each queue (default latest)")
    parser.add_argument("--groups", nargs="*", default=[],
                        help="consumer groups whose offsets the checkpoint job translates to the standby "
                             "(each while it has no live consumer there)")
    parser.add_argument("--max-records-per-trigger", type=positive_int,
                        default=limits.REPLICATOR_MAX_RECORDS_PER_TRIGGER,
                        help="messages one micro-batch reads at most, shared fairly by the queues")
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval of replication")
    parser.add_argument("--heartbeat-seconds", type=float, default=limits.REPLICATOR_HEARTBEAT_INTERVAL_S)
    parser.add_argument("--checkpoint-seconds", type=float, default=limits.REPLICATOR_CHECKPOINT_INTERVAL_S)
    parser.add_argument("--config-seconds", type=float, default=limits.REPLICATOR_CONFIG_INTERVAL_S)
    parser.add_argument("--metrics", default="", metavar="HOST:PORT",
                        help="serve the driver's Prometheus metrics at http://HOST:PORT/metrics (default off)")
    for side, cluster in zip(SIDES, ("primary", "standby")):
        parser.add_argument(f"--{side}-ak", default="", metavar="ACCESS_KEY",
                            help=f"sign every call to the {cluster} cluster as this user, a Super user with "
                                 f"authorizationEnabled (default: ${ACCESS_KEY_ENV[side]})")
        parser.add_argument(f"--{side}-sk", default="", metavar="SECRET_KEY",
                            help=f"that user's secret key (default: ${SECRET_KEY_ENV[side]}; ps shows arguments, "
                                 f"not the environment)")
    parser.add_argument("--sync-acl-deletes", action="store_true",
                        help="the config job also deletes the standby's users and rules that the primary lacks "
                             "(default: it only creates and updates them)")


def credentials(args: argparse.Namespace, side: str) -> Credentials | None:
    """The replicator's user on one side: its options, each else from the environment."""
    return credentials_of(getattr(args, f"{side}_ak") or os.environ.get(ACCESS_KEY_ENV[side], ""),
                          getattr(args, f"{side}_sk") or os.environ.get(SECRET_KEY_ENV[side], ""),
                          f"--{side}-ak and --{side}-sk, or {ACCESS_KEY_ENV[side]} and {SECRET_KEY_ENV[side]}")


def settings(args: argparse.Namespace) -> "Settings":
    """The Settings the parsed options name; BAD_REQUEST for an access key without its secret key
    or the other way round."""
    from quorumq.replicator.jobs import Settings

    topics = dict(args.topics)
    return Settings(
        source=args.source, target=args.target, topics=tuple(topics), checkpoint=args.checkpoint,
        tag_filters={topic: tags for topic, tags in topics.items() if tags != "*"}, on_failure=args.on_failure,
        dedupe=args.dedupe, starting=args.starting, groups=tuple(args.groups),
        max_records_per_trigger=args.max_records_per_trigger, trigger_s=args.trigger_seconds,
        heartbeat_interval_s=args.heartbeat_seconds, checkpoint_interval_s=args.checkpoint_seconds,
        config_interval_s=args.config_seconds, source_credentials=credentials(args, "source"),
        target_credentials=credentials(args, "target"), acl_deletes=args.sync_acl_deletes)
