"""The replicator's Spark driver: one application per direction, running every job as its own
streaming query and printing progress to stdout until a query fails or SIGTERM/SIGINT stops it.

`quorumq replicator run` calls `run` in its own process, so that process is the driver; on a Spark
cluster, `spark-submit` this file with the same arguments (docs/replicator.md).
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from quorumq.client import ClientError
from quorumq.errors import QuorumqError
from quorumq.replicator import jobs, options
from quorumq.replicator.datasource import register
from quorumq.replicator.jobs import Settings
from quorumq.replicator.metrics import DriverMetrics, queue_lag

PROGRESS_INTERVAL_S = 5.0


def spark_session(master: str | None, app_name: str) -> Any:
    """A session for the replicator. Its Python workers run this interpreter (Spark would take
    `python3` from PATH, which may lack quorumq and pyarrow)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import (
        SparkSession,  # imported late: the environment above must be set first
    )

    builder = (SparkSession.builder.appName(app_name).config("spark.scheduler.mode", "FAIR")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2"))
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def refusal(settings: Settings) -> str | None:
    """Whether each cluster serves the replicator the look-up its config job starts with (users of
    authenticationEnabled and authorizationEnabled are checked there); what went wrong, as one
    line naming the cluster and the options that fix it, or None."""
    for side, cluster in zip(options.SIDES, ("primary", "standby")):
        access_point, credentials = getattr(settings, side), getattr(settings, f"{side}_credentials")
        try:
            jobs.masters(access_point, credentials)
        except ClientError as error:
            hint = {"UNAUTHENTICATED": f"; give the replicator a user of that cluster: --{side}-ak and --{side}-sk, "
                                       f"or {options.ACCESS_KEY_ENV[side]} and {options.SECRET_KEY_ENV[side]}",
                    "NO_PERMISSION": "; the replicator's user there must be a Super user"}.get(error.name, "")
            return f"the {cluster} cluster at {access_point} refused the replicator: {error}{hint}"
    return None


def start_jobs(spark: Any, settings: Settings) -> list[Any]:
    """Every job's query (the config was copied once before Spark started, `run`)."""
    queries = [jobs.start_config(spark, settings), jobs.start_replicate(spark, settings),
               *jobs.start_heartbeat(spark, settings)]
    if settings.groups:
        queries.append(jobs.start_checkpoint(spark, settings))
    return queries


def progress_lines(progress: dict[str, dict], settings: Settings) -> list[str]:
    """One line per query with data (rows/s and lag per queue), from each query's last progress
    (DriverMetrics.refresh), then the sink's counters, the heartbeat's latest status and the
    checkpoint job's last round."""
    lines = []
    for name, last in progress.items():
        source = last["sources"][0]
        lag = {"/".join(queue): behind
               for queue, behind in sorted(queue_lag(source.get("endOffset"), source.get("latestOffset")).items())}
        lines.append(f"{name}: batch {last['batchId']} rows {last['numInputRows']} "
                     f"in {source.get('inputRowsPerSecond', 0):.0f}/s processed "
                     f"{source.get('processedRowsPerSecond', 0):.0f}/s lag {sum(lag.values())} {json.dumps(lag)}")
    for name, path in (("totals", settings.metrics_path), ("heartbeat", settings.heartbeat_path),
                       ("checkpoint", settings.groups_path)):
        if path.exists():
            lines.append(f"{name}: {path.read_text()}")
    return lines


def run(settings: Settings, master: str | None, metrics_address: str = "") -> int:
    """Run until a query fails (exit 1) or a signal stops the application (exit 0); with a
    `metrics_address` (host:port), serve Prometheus metrics there. A cluster that refuses the
    replicator's first calls, or the config's first copy, ends it at once (exit 1)."""
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    refused = refusal(settings)
    if refused is None:
        # Once before any data moves, so that the target has every queue the replicate job writes to
        # and knows every group before it can move there.
        try:
            jobs.copy_config(settings)
        except ClientError as error:
            refused = f"copying the config to the standby failed: {error}"
    if refused is not None:  # before Spark's slow start
        print(f"quorumq replicator: {refused}", file=sys.stderr, flush=True)
        return 1
    metrics = DriverMetrics(settings)
    if metrics_address:
        metrics.serve(metrics_address)
    spark = spark_session(master, "quorumq-replicator")
    queries = start_jobs(spark, settings)
    print(f"replicating {','.join(settings.topics)} from {settings.source} to {settings.target}; "
          f"driver pid {os.getpid()}", flush=True)
    failed = None
    while not stop.wait(PROGRESS_INTERVAL_S):
        failed = next((query for query in queries if not query.isActive), None)
        if failed is not None:
            break
        metrics.refresh(queries)
        print(f"[{time.strftime('%H:%M:%S')}] " + "\n  ".join(progress_lines(metrics.progress, settings)), flush=True)
    error = failed.exception() if failed is not None else None
    metrics.stop()
    try:
        for query in queries:
            jobs.stop(query)
        spark.stop()
    except Exception as stop_error:  # noqa: BLE001 - Ctrl-C also reaches the JVM, which may be gone already
        print(f"quorumq replicator: stopping: {stop_error.__class__.__name__}", file=sys.stderr, flush=True)
    if failed is not None:
        print(f"query {failed.name} stopped: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def run_with_options(args: argparse.Namespace) -> int:
    """Run the driver as `quorumq replicator run` and spark-submit name it (replicator/options.py)."""
    try:
        settings = options.settings(args)
    except QuorumqError as error:
        print(f"quorumq replicator: {error}", file=sys.stderr)
        return 2  # as argparse: the command line is wrong
    return run(settings, args.spark_master, args.metrics)


def main(argv: list[str]) -> int:
    """The same options as `quorumq replicator run`, for `spark-submit .../replicator/app.py ARGS`."""
    parser = argparse.ArgumentParser(prog="replicator", description=__doc__)
    options.add_arguments(parser)
    return run_with_options(parser.parse_args(argv))


if __name__ == "__main__":  # spark-submit src/quorumq/replicator/app.py ARGS (the same as `replicator run`)
    sys.exit(main(sys.argv[1:]))
