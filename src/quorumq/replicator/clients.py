"""Broker clients and the clock for Spark's Python processes, made on first use and kept per
process.

Readers and writers are pickled into tasks (a client holds threads and sockets, which do not
pickle), and Spark reuses its Python workers across tasks and micro-batches, so one client per
process, access point and credentials serves every task that process runs. The credentials reach
a task in its reader's or writer's options (datasource.py); every client signs its calls with them.
The clock is made where it is read, so each process sees its own offset (clock.py keys a jumped
clock by process id).
"""

import json
from typing import Any

from quorumq.client import AdminClient, Blocking, ClientError, Message, Producer, PullConsumer
from quorumq.clock import Clock
from quorumq.core.auth import Credentials

# The group the replicator's pulls name; pulls by offset never move its committed offsets.
PULL_GROUP = "CID_RMQ_SYS_REPLICATOR"

_clients: dict[tuple[str, str, Credentials | None], Any] = {}


def _cached(kind: str, access_point: str, credentials: Credentials | None, make: Any) -> Any:
    client = _clients.get((kind, access_point, credentials))
    if client is None:
        client = _clients[(kind, access_point, credentials)] = make()
    return client


def clock() -> Clock:
    return _cached("clock", "", None, Clock)


def admin(access_point: str, credentials: Credentials | None) -> Any:
    return _cached("admin", access_point, credentials,
                   lambda: Blocking(AdminClient, access_point, credentials=credentials))


def consumer(access_point: str, credentials: Credentials | None) -> Any:
    return _cached("consumer", access_point, credentials,
                   lambda: Blocking(PullConsumer, access_point, PULL_GROUP, credentials=credentials))


def producer(access_point: str, credentials: Credentials | None) -> Any:
    return _cached("producer", access_point, credentials,
                   lambda: Blocking(Producer, access_point, credentials=credentials))


def cluster_name(access_point: str, credentials: Credentials | None) -> str:
    """The brokerClusterName of the cluster behind an access point (its first registered broker)."""
    def ask() -> str:
        brokers = admin(access_point, credentials).brokers()
        if not brokers:
            raise ClientError("BROKER_NOT_FOUND", f"no broker is registered at {access_point}")
        return brokers[0].cluster

    return _cached("cluster", access_point, credentials, ask)


def send_json(access_point: str, credentials: Credentials | None, topic: str, record: dict, key: str) -> None:
    """One small JSON record to queue 0 of a system topic (offset syncs, heartbeats)."""
    [result] = producer(access_point, credentials).send_batch(
        topic, [Message(json.dumps(record).encode(), keys=(key,))], queue_id=0)
    if not result.ok:
        raise ClientError(result.status, f"{topic}: {result.detail}")
