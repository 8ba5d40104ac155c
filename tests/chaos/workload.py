"""The workloads of the reliability spec, each in a thread of its own, writing every operation to
the history (invoke, then ok, fail or info) so the checkers can judge the cluster:

- W1, producers that send unique values, one send in flight each;
- W3, the same producers made idempotent: a value keeps its message id and its queue when it is
  sent again after an unknown outcome, until it is acknowledged, so it must be stored once;
- W2, consumer groups that pull, commit after processing and are rebalanced now and then;
- W4, admin churn: topics made, written and deleted in turn, names used again;
- W6, FIFO: the official client's producers send in many message groups to a FIFO topic, and
  SimpleConsumers of one FIFO group receive, acknowledge most, fail a few and crash now and then,
  beside a reader of the group's dead-letter queue;
- W7, timers and transactions: the official client's producers send delay messages due throughout
  the run and transactional messages committed, rolled back or left to the broker's check, and
  SimpleConsumers receive both;
- W8, access churn: users and their rules made, changed and deleted on the master in turn."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import subprocess
import threading
import time
import uuid
import zlib
from collections import defaultdict
from typing import Callable

import grpc
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer, TransactionChecker
from rocketmq import Message as OfficialMessage
from rocketmq import Producer as OfficialProducer
from rocketmq.grpc_protocol import Code
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc
from rocketmq.v5.consumer import consumer as official_consumer
from rocketmq.v5.exception import (
    BadRequestException,
    ClientException,
    ForbiddenException,
    NotFoundException,
    PayloadTooLargeException,
)

from checkers import access_grant, commit_intended
from harness import cli
from history import History
from quorumq.client import AdminClient, ClientError, Message, Producer, PullConsumer
from quorumq.client import Credentials as Signing
from quorumq.client.routes import v5_signature
from quorumq.cluster import cluster_pb2 as pb
from quorumq.tls import client_tls

SEND_TIMEOUT_S = 5.0
# Refusals that say the message was not stored; every other error leaves it unknown ("info").
DEFINITE_REFUSALS = frozenset({"TOPIC_NOT_FOUND", "NO_PERMISSION", "MESSAGE_ILLEGAL", "BAD_REQUEST"})
CONSUMER_TIMEOUT_S = 5.0
REBALANCE_S = 30.0
PULL_BATCH = 32
RETRY_PAUSE_S = 0.2
CHURN_TOPICS = ("ChurnA", "ChurnB")
CHURN_PERIOD_S = 3.0  # one topic made or deleted this often: a low rate beside the producers
CHURN_SENDS = 5  # values sent to a topic each time it is made
SETUP_TRIES = 3  # a setup admin command's tries


class Workload:
    """Runs `_run()` in a thread of its own until halted."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._guarded()), name=name, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def halt(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def stop(self) -> None:
        """Halt, and raise what made the workload fail."""
        self.halt()
        if self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} did not stop")
        if self.error:
            raise RuntimeError(f"{self._thread.name} failed") from self.error

    async def _guarded(self) -> None:
        try:
            await self._run()
        except BaseException as error:  # surfaced by stop()
            self.error = error

    async def _run(self) -> None:
        raise NotImplementedError


class Producers(Workload):
    """W1: `count` producers; each sends `p<i>-<seq>` values one at a time, every `pause_s`, and
    sends a value again once after an unknown outcome, as a new message (a new id).

    W3 (`queues` given): producer i sends to queue i % queues, each value with a message id of
    the producer's id and the sequence, and sends it again with that id after each unknown
    outcome (pausing RETRY_PAUSE_S) until it is acknowledged or refused: the broker stores it once.
    Its sends are recorded `idempotent`, so C4 allows none of its values twice."""

    def __init__(self, access_point: str, topic: str, history: History, count: int = 4,
                 pause_s: float = 0.02, queues: int | None = None, credentials: Signing | None = None) -> None:
        super().__init__("producers")
        self.access_point, self.topic, self.history = access_point, topic, history
        self.count, self.pause_s, self.queues = count, pause_s, queues
        self.credentials = credentials  # every call signed with them (the secure profile)

    async def _run(self) -> None:
        await asyncio.gather(*(self._produce(f"p{index}", index) for index in range(self.count)))

    async def _produce(self, name: str, index: int) -> None:
        producer_id = uuid.uuid4().hex[:16].upper()
        queue_id = None if self.queues is None else index % self.queues
        async with Producer(self.access_point, timeout_s=SEND_TIMEOUT_S, retry_s=SEND_TIMEOUT_S,
                            credentials=self.credentials) as producer:
            sequence = 0
            while not self._stop.is_set():
                value = f"{name}-{sequence}"
                if queue_id is None:
                    if not await self._send(producer, name, Message(value.encode())):
                        await self._send(producer, name, Message(value.encode()))  # the retry C4 allows to duplicate
                else:
                    message = Message(value.encode(), message_id=f"{producer_id}{sequence:016X}")
                    while not await self._send(producer, name, message, queue_id) and not self._stop.is_set():
                        await asyncio.sleep(RETRY_PAUSE_S)
                sequence += 1
                await asyncio.sleep(self.pause_s)

    async def _send(self, producer: Producer, name: str, message: Message, queue_id: int | None = None) -> bool:
        """One send, recorded; whether it was acknowledged or definitely refused."""
        value = message.body.decode()
        op = self.history.invoke(name, "send", value, **({} if queue_id is None else {"idempotent": True}))
        try:
            result = (await producer.send_batch(self.topic, [message], queue_id))[0]
        except ClientError as error:
            if error.name in DEFINITE_REFUSALS:
                self.history.fail(op, error.name)
                return True
            self.history.info(op, error.name)
            return False
        if result.status != "SEND_OK":  # stored on the master at least, maybe more
            self.history.info(op, result.status)
            return False
        self.history.ok(op, queue=f"{result.broker_name}:{result.queue_id}", offset=result.queue_offset,
                        epoch=result.master_epoch, broker=result.broker_name, attempts=result.attempts)
        return True


class Consumers(Workload):
    """W2: `groups` consumer groups of two consumers each share the topic's queues; a consumer
    reads a queue's committed offset when it takes the queue ("position"), pulls, and commits
    the offset after what it read ("commit"). Every REBALANCE_S the queues change hands; a queue
    is worked by one consumer at a time, and a consumer that lost a queue, or an answer, reads
    the committed offset again before it goes on."""

    def __init__(self, access_point: str, topic: str, queues: int, history: History, groups: int = 2,
                 credentials: Signing | None = None) -> None:
        super().__init__("consumers")
        self.access_point, self.topic, self.queues, self.history = access_point, topic, queues, history
        self.credentials = credentials
        self.groups = [f"chaos-group-{index}" for index in range(groups)]
        self._shift = 0  # consumer c of a group works the queues q with (q + shift) % 2 == c
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}  # one consumer on a queue at a time

    def _owner(self, queue: int) -> int:
        return (queue + self._shift) % 2

    async def _run(self) -> None:
        self._locks = {(group, queue): asyncio.Lock() for group in self.groups for queue in range(self.queues)}
        consumers = [self._consume(group, index) for group in self.groups for index in range(2)]
        await asyncio.gather(self._rebalance(), *consumers)

    async def _rebalance(self) -> None:
        next_at = time.monotonic() + REBALANCE_S
        while not self._stop.is_set():  # looked at often: a halt must not wait out a rebalance period
            await asyncio.sleep(RETRY_PAUSE_S)
            if time.monotonic() >= next_at:
                self._shift += 1
                next_at += REBALANCE_S

    async def _consume(self, group: str, index: int) -> None:
        name = f"{group}/c{index}"
        positions: dict[int, int] = {}  # queue -> where this consumer goes on reading
        shift = self._shift  # the assignment `positions` were read under
        async with PullConsumer(self.access_point, group, timeout_s=CONSUMER_TIMEOUT_S,
                                credentials=self.credentials) as consumer:
            for queue in itertools.cycle(range(self.queues)):
                if self._stop.is_set():
                    return
                async with self._locks[group, queue]:
                    if shift != self._shift:  # the queues changed hands, maybe away and back: read again
                        positions.clear()
                        shift = self._shift
                    if self._owner(queue) != index:
                        await asyncio.sleep(0)
                        continue
                    if not await self._step(consumer, name, group, queue, positions):
                        await asyncio.sleep(RETRY_PAUSE_S)

    async def _step(self, consumer: PullConsumer, name: str, group: str, queue: int,
                    positions: dict[int, int]) -> bool:
        """Position, pull and commit once on one queue; whether it went without error."""
        key = {"group": group, "queue": queue}
        if queue not in positions:
            op = self.history.invoke(name, "position", key)
            try:
                committed = await consumer.get_offset(self.topic, queue)
            except ClientError as error:
                self.history.fail(op, error.name)
                return False
            self.history.ok(op, offset=committed)
            positions[queue] = committed or 0
        try:
            result = await consumer.pull(self.topic, queue, positions[queue], PULL_BATCH, long_poll_s=0.5)
        except ClientError:
            return False
        if not result.messages:
            return True
        offset = result.next_offset
        op = self.history.invoke(name, "commit", {**key, "offset": offset})
        try:
            await consumer.commit_offset(self.topic, queue, offset)
        except ClientError as error:
            self.history.info(op, error.name)  # it may have been applied: read the position again
            positions.pop(queue, None)
            return False
        self.history.ok(op)
        positions[queue] = offset
        return True


class TopicChurn(Workload):
    """W4: every CHURN_PERIOD_S the next of CHURN_TOPICS is made (on every broker, one queue) and
    sent CHURN_SENDS values "<topic>/<life>-<i>", or deleted (`deleteTopic`) when it was made the
    turn before, so each name lives, dies and is made again during the faults. Recorded as
    create-topic and delete-topic (value: the topic; ok only when every broker applied it) and
    churn-send (with its topic), which C11 judges apart from the producers' sends."""

    def __init__(self, access_point: str, brokers: list[str], history: History,
                 credentials: Signing | None = None) -> None:
        super().__init__("churn")
        self.access_point, self.brokers, self.history = access_point, brokers, history
        self.credentials = credentials

    async def _run(self) -> None:
        lives = itertools.count()
        live: set[str] = set()
        async with AdminClient(self.access_point, timeout_s=SEND_TIMEOUT_S, credentials=self.credentials) as admin, \
                Producer(self.access_point, timeout_s=SEND_TIMEOUT_S, retry_s=SEND_TIMEOUT_S,
                         credentials=self.credentials) as producer:
            for topic in itertools.cycle(CHURN_TOPICS):
                if self._stop.is_set():
                    return
                if topic in live:
                    live.discard(topic)
                    await self._admin("delete-topic", topic, admin.delete_topic(topic))
                else:
                    live.add(topic)
                    await self._admin("create-topic", topic, admin.update_topic_on(self.brokers, topic, 1, 1))
                    life = next(lives)
                    for index in range(CHURN_SENDS):
                        await self._send(producer, topic, f"{topic}/{life}-{index}")
                until = time.monotonic() + CHURN_PERIOD_S
                while time.monotonic() < until and not self._stop.is_set():
                    await asyncio.sleep(RETRY_PAUSE_S)

    async def _admin(self, f: str, topic: str, call) -> None:
        op = self.history.invoke("churn", f, topic)
        try:
            await call
        except ClientError as error:  # applied on some brokers, maybe on none
            self.history.info(op, error.name)
        else:
            self.history.ok(op)

    async def _send(self, producer: Producer, topic: str, value: str) -> None:
        op = self.history.invoke("churn", "churn-send", value, topic=topic)
        try:
            result = (await producer.send_batch(topic, [Message(value.encode())], 0))[0]
        except ClientError as error:
            (self.history.fail if error.name in DEFINITE_REFUSALS else self.history.info)(op, error.name)
            return
        if result.status == "SEND_OK":
            self.history.ok(op)
        else:
            self.history.info(op, result.status)


ACCESS_PERIOD_S = 3.0  # one user made this often, as W4's topics: a low rate beside the producers
ACCESS_EDIT_CHANCE = 0.5  # of the periods, those that also update or delete an earlier user
ACCESS_USER_PREFIX = "w8u"
# Refusals raised before a broker changes anything; any other error leaves a change unknown
# (SERVICE_NOT_AVAILABLE among them: a slave refuses with it at once, but so does a master deposed
# while it waited for its SyncStateSet, the change made on it already).
ACCESS_REFUSALS = frozenset({"BAD_REQUEST", "TOO_MANY_REQUESTS", "NO_PERMISSION", "UNAUTHENTICATED"})

ACCESS_METHODS = {"create-user": "CreateUser", "update-user": "UpdateUser", "delete-user": "DeleteUser",
                  "create-acl": "CreateAcl", "update-acl": "UpdateAcl",
                  "delete-acl": "DeleteAcl"}  # the history's name of each change -> BrokerAdmin's
ACCESS_GROUP = "Group:chaos-w8"  # the second resource W8's update-acl gives a user


class AccessChurn(Workload):
    """W8: every ACCESS_PERIOD_S, on the broker that says it is master (of those that answer its
    status, the one of the highest master epoch), signed as the run's init user (a Super user):
    CreateUser "w8u<N>" (Normal, a known password), CreateAcl giving it Pub on `topic`, and, one
    period in two, one edit of an earlier user that may exist: UpdateUser (a new password, the
    other status, or the other type), UpdateAcl (Sub on ACCESS_GROUP, or Pub and Sub on `topic`),
    DeleteAcl (one of its resources) or DeleteUser. Recorded by the history's names of
    ACCESS_METHODS (value the user, with what the change sets): ok when answered, fail when refused
    before anything changed (ACCESS_REFUSALS), info otherwise. C15 judges them against the users
    and rules every replica holds after the heal."""

    def __init__(self, access_point: str, brokers: list[str], topic: str, history: History, seed: int,
                 credentials: Signing | None = None) -> None:
        super().__init__("access")
        self.access_point, self.brokers, self.topic, self.history = access_point, brokers, topic, history
        self.rng = random.Random(f"{seed}-access")
        self.credentials = credentials

    async def _run(self) -> None:
        made: list[str] = []  # users a create may have made and no acknowledged delete removed
        versions: dict[str, int] = {}  # user -> its last password's number
        async with AdminClient(self.access_point, timeout_s=SEND_TIMEOUT_S, credentials=self.credentials) as admin:
            for index in itertools.count():
                until = time.monotonic() + ACCESS_PERIOD_S
                master = await self._master(admin)
                if master is not None:
                    earlier = list(made)
                    name = f"{ACCESS_USER_PREFIX}{index}"
                    versions[name] = 0
                    request = pb.AuthUser(username=name, password=f"{name}-0", user_type="Normal")
                    if await self._change(admin, master, "create-user", name, request, password=request.password):
                        made.append(name)
                    entry = pb.AclEntry(resource=f"Topic:{self.topic}", actions=["Pub"], decision="Allow")
                    await self._change(admin, master, "create-acl", name,
                                       pb.Acl(subject=f"User:{name}", entries=[entry]), resource=entry.resource,
                                       grant=access_grant(entry.actions, entry.decision))
                    if earlier and self.rng.random() < ACCESS_EDIT_CHANCE:
                        await self._edit(admin, master, self.rng.choice(earlier), made, versions)
                while time.monotonic() < until and not self._stop.is_set():
                    await asyncio.sleep(RETRY_PAUSE_S)
                if self._stop.is_set():
                    return

    async def _edit(self, admin: AdminClient, master: str, name: str, made: list[str],
                    versions: dict[str, int]) -> None:
        edit = self.rng.choice(("password", "user_status", "user_type", "update-acl", "delete-acl", "delete-user"))
        if edit == "password":
            versions[name] += 1
            password = f"{name}-{versions[name]}"
            await self._change(admin, master, "update-user", name, pb.AuthUser(username=name, password=password),
                               password=password)
        elif edit in ("user_status", "user_type"):
            value = self.rng.choice(("enable", "disable") if edit == "user_status" else ("Normal", "Super"))
            await self._change(admin, master, "update-user", name, pb.AuthUser(username=name, **{edit: value}),
                               **{edit: value})
        elif edit == "update-acl":
            resource, actions = self.rng.choice(((ACCESS_GROUP, ["Sub"]), (f"Topic:{self.topic}", ["Pub", "Sub"])))
            entry = pb.AclEntry(resource=resource, actions=actions, decision="Allow")
            await self._change(admin, master, "update-acl", name, pb.Acl(subject=f"User:{name}", entries=[entry]),
                               resource=resource, grant=access_grant(actions, entry.decision))
        elif edit == "delete-acl":
            resource = self.rng.choice((ACCESS_GROUP, f"Topic:{self.topic}"))
            await self._change(admin, master, "delete-acl", name,
                               pb.AclRequest(subject=f"User:{name}", resources=[resource]), resource=resource)
        elif await self._change(admin, master, "delete-user", name, pb.UserRequest(username=name)) == "ok":
            made.remove(name)

    async def _master(self, admin: AdminClient) -> str | None:
        masters = []
        for address in self.brokers:
            try:
                status = await admin.broker_status(address)
            except ClientError:  # stopped, paused or cut off
                continue
            if status["brokerRole"] != "SLAVE":
                masters.append((int(status["masterEpoch"]), address))
        return max(masters)[1] if masters else None

    async def _change(self, admin: AdminClient, master: str, f: str, name: str, request, **extra: str) -> str | None:
        """One change, recorded; its outcome ("ok", "info"), or None when it was refused."""
        op = self.history.invoke("access", f, name, broker=master, **extra)
        try:
            await admin.change_access([master], ACCESS_METHODS[f], request)
        except ClientError as error:
            if error.name in ACCESS_REFUSALS:
                self.history.fail(op, error.name)
                return None
            self.history.info(op, error.name)
            return "info"
        self.history.ok(op)
        return "ok"


FIFO_TOPIC = "ChaosFifo"
FIFO_QUEUES = 8
FIFO_GROUP = "chaos-fifo"
DLQ_TOPIC = f"%DLQ%{FIFO_GROUP}"
DLQ_READER_GROUP = "chaos-fifo-dlq-reader"
FIFO_RETRY_MAX_TIMES = 3  # at most 4 deliveries: a poison value reaches the DLQ within seconds
FIFO_BACKOFF_MS = 1000  # the group's back-off before each retry
MESSAGE_GROUPS = 64
FIFO_PRODUCERS = 2  # each sends to every FIFO_PRODUCERS-th message group
FIFO_CONSUMERS = 3
FIFO_BATCH = 16
FIFO_INVISIBLE_S = 5
NACK_INVISIBLE_S = 1  # limits.INVISIBLE_SECONDS_MIN
FIFO_AWAIT_S = 2  # a receive's long poll
FAIL_RATE = 0.03  # deliveries a consumer fails on purpose, outside the drain
POISON_EVERY = 400  # about one value in this many fails every delivery, so dead letters happen
CRASH_EVERY_S = (10.0, 30.0)  # a consumer crashes this long after it started (drawn uniformly)
# The drain ends once DRAIN_IDLE_S pass with nothing settled, or at DRAIN_TIMEOUT_S: a poison value
# holds its queue for about 20 s (4 deliveries, each behind a follower's 5 s lease), so a queue with
# three of them outlasted a fixed 60 s while it still delivered (F13 seed 520533740), whereas a
# queue held for good settles nothing.
DRAIN_IDLE_S = 45.0
DRAIN_TIMEOUT_S = 300.0
DLQ_READER = "fifo-dlq"  # its thread's and history's name
# Sent values not yet settled at which the producers wait: with failures holding their queues (the
# pop-orderly rule) the consumers settle about 40 a second, the drain about 200, and unthrottled
# producers under F13's short faults left 17,600 to a drain that settled 11,600 in 60 s.
FIFO_BACKLOG_MAX = 2000
DRAIN_POLL_S = 0.2
# Answers that say a request was refused and changed nothing; any other error leaves it unknown.
OFFICIAL_REFUSALS = (BadRequestException, NotFoundException, ForbiddenException, PayloadTooLargeException)


class FifoUnsupported(Exception):
    """The cluster does not serve what W6 needs yet: FIFO topics, subscription groups, dead letters."""


class _PlacedMessage(OfficialMessage):
    """The official client's received message, keeping the queue and offset the broker sent (its
    Message drops them), so the history says where each delivery came from."""

    queue_id: int | None = None
    queue_offset: int | None = None

    def fromProtobuf(self, message):  # the official client's name
        super().fromProtobuf(message)
        self.queue_id = message.system_properties.queue_id
        self.queue_offset = message.system_properties.queue_offset
        return self


official_consumer.Message = _PlacedMessage  # what every official consumer decodes received messages into


def _error_name(error: Exception) -> str:
    if isinstance(error, ClientException) and isinstance(error.code, int):
        return Code.Name(error.code)
    if isinstance(error, grpc.RpcError):
        return error.code().name
    return type(error).__name__


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _unreached(error: Exception) -> bool:
    """A call that reached no broker: gRPC could not connect (a killed broker's port). Only for
    calls the official client makes once (receive, ack, change of invisible time): its sends are
    tried again inside it, and an earlier try may have landed."""
    return (isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE
            and "failed to connect" in (error.details() or ""))


def _poison(value: str) -> bool:
    return zlib.crc32(value.encode()) % POISON_EVERY == 0


def _setup_admin(namesrv: str, cluster: str, *args) -> subprocess.CompletedProcess:
    """`quorumq admin ARGS` of a run's setup (made again, they change nothing), tried again while a
    broker does not answer in time: on a loaded machine W7's first updateTopic met a master that
    took longer than the connection timeout (seed 7005: "connection attempt timed out before
    receiving SETTINGS frame"), before any fault."""
    for _ in range(SETUP_TRIES):
        done = cli("admin", *args, "-n", namesrv, "-c", cluster)
        if done.returncode == 0 or "UNAVAILABLE" not in done.stderr:
            break
        time.sleep(RETRY_PAUSE_S)
    return done


def _v5_channel(address: str) -> grpc.Channel:
    """A channel for a raw v5 call: TLS when the run's clients use it (QUORUMQ_TLS_CA)."""
    client = client_tls()
    return grpc.insecure_channel(address) if client is None else grpc.secure_channel(
        address, client.channel_credentials())


def _signed(credentials: Signing | None) -> tuple[tuple[str, str], ...]:
    return () if credentials is None else v5_signature(credentials)


def prepare_fifo(namesrv: str, cluster: str, broker: str, credentials: Signing | None = None) -> None:
    """W6's FIFO topic and consumer group, made with the admin commands a user runs, and a look at
    whether `broker` serves dead letters (signed with `credentials`; the admin commands with the
    environment's QUORUMQ_ACCESS_KEY and QUORUMQ_SECRET_KEY). Raises FifoUnsupported when the cluster does not serve
    these yet, RuntimeError when a command it does serve failed."""
    policy = {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [FIFO_BACKOFF_MS]}}
    for args in (("updateTopic", "-t", FIFO_TOPIC, "-r", FIFO_QUEUES, "-w", FIFO_QUEUES, "-a", "+message.type=FIFO"),
                 ("updateSubGroup", "-g", FIFO_GROUP, "-o", "true", "-r", FIFO_RETRY_MAX_TIMES,
                  "-p", json.dumps(policy))):
        done = _setup_admin(namesrv, cluster, *args)
        if done.returncode == 2 and ("invalid choice" in done.stderr or "unrecognized arguments" in done.stderr):
            raise FifoUnsupported(f"quorumq admin {args[0]}: {done.stderr.strip().splitlines()[-1]}")
        if done.returncode != 0:
            raise RuntimeError(f"quorumq admin {' '.join(map(str, args))}: {done.stderr.strip()}")
    request = v5s.ForwardMessageToDeadLetterQueueRequest(
        group=v5.Resource(name=FIFO_GROUP), topic=v5.Resource(name=FIFO_TOPIC), receipt_handle="probe",
        message_id="probe", delivery_attempt=1, max_delivery_attempts=1)
    with _v5_channel(broker) as channel:
        answer = v5_grpc.MessagingServiceStub(channel).ForwardMessageToDeadLetterQueue(
            request, timeout=SEND_TIMEOUT_S, metadata=_signed(credentials))
    if answer.status.code == Code.NOT_IMPLEMENTED:
        raise FifoUnsupported(f"ForwardMessageToDeadLetterQueue: {answer.status.message}")


class OfficialWorkload:
    """A workload of the official client, whose calls block: each client in a thread of its own,
    started once the cluster is whole; `stop()` drains (`_drain`), halts, and raises what made
    a thread fail."""

    def __init__(self, endpoints: str, history: History, seed: int, credentials: Signing | None = None) -> None:
        self.history, self.seed = history, seed
        signing = Credentials() if credentials is None else Credentials(credentials.access_key, credentials.secret_key)
        self.config = ClientConfiguration(endpoints, signing, request_timeout=int(SEND_TIMEOUT_S))
        # TLS when quorumq's client uses it; the official client trusts the CA that the run puts in
        # GRPC_DEFAULT_SSL_ROOTS_FILE_PATH.
        self.tls = client_tls() is not None
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.error: BaseException | None = None

    def _spawn(self, name: str, target: Callable, *args) -> None:
        """Run target(*args) in a thread that ends with the workload; the thread shuts its client down."""
        thread = threading.Thread(target=self._guarded, args=(target, *args), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guarded(self, target: Callable, *args) -> None:
        try:
            target(*args)
        except BaseException as error:  # surfaced by stop()
            self.error = self.error or error

    def _producer(self, topics: tuple[str, ...]) -> OfficialProducer:
        return OfficialProducer(self.config, topics, tls_enable=self.tls)

    def _simple_consumer(self, group: str, topic: str) -> SimpleConsumer:
        return SimpleConsumer(self.config, group, {topic: FilterExpression()}, await_duration=FIFO_AWAIT_S,
                              tls_enable=self.tls)

    def _started(self, client):
        """The client, started; raises what made it fail."""
        client.startup()
        return client

    def _restarted(self, make: Callable):
        """A client `make()` made, started, tried again while the cluster fails over; None once halted."""
        while not self._stop.is_set():
            try:
                return self._started(make())
            except Exception:  # noqa: BLE001 - the official client raises its own types while the group fails over
                time.sleep(RETRY_PAUSE_S)
        return None

    def _recorded_send(self, op: int, producer: OfficialProducer, message: OfficialMessage, transaction=None) -> str:
        """One send, its outcome recorded on `op` (ok adds the message id, its offset and the
        client's wall time of the ack): "ok", "fail" (refused) or "info" (it may be stored)."""
        try:
            receipt = producer.send(message, transaction)
        except OFFICIAL_REFUSALS as error:
            self.history.fail(op, _error_name(error))
            return "fail"
        except Exception as error:  # noqa: BLE001 - timeouts and transport errors: it may be stored
            self.history.info(op, _error_name(error))
            return "info"
        self.history.ok(op, id=receipt.message_id, offset=receipt.offset, wall_ms=_wall_ms())
        return "ok"

    def halt(self, timeout: float = 30.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Drain, halt, and raise what made the workload fail."""
        self._draining.set()
        self._drain()
        self.halt()
        alive = [thread.name for thread in self._threads if thread.is_alive()]
        if alive:
            raise RuntimeError(f"{', '.join(alive)} did not stop")
        if self.error:
            raise RuntimeError(f"{type(self).__name__} failed") from self.error

    def _drain(self) -> None:
        raise NotImplementedError


class FifoWorkload(OfficialWorkload):
    """W6, with the official client, in threads of its own (its calls block):

    - FIFO_PRODUCERS producers send values "g<k>-<seq>" to FIFO_TOPIC, message group "g<k>", k of
      MESSAGE_GROUPS, each group's sequence increasing; a producer goes round its groups with one
      send in flight, and a value whose outcome is unknown is sent again (a new message) at its
      group's next turn until it is acknowledged or refused, only then the group's next
      ("fifo-send"); they wait while FIFO_BACKLOG_MAX values are unsettled, so the drain can
      settle them all;
    - FIFO_CONSUMERS SimpleConsumers of FIFO_GROUP receive ("fifo-receive": each message's value,
      id, queue, offset and delivery attempt) and take each message group's messages in order:
      they ack most ("fifo-ack"), fail FAIL_RATE of them and every poison value ("fifo-fail": no
      ack, either ChangeInvisibleDuration to NACK_INVISIBLE_S or the lease left to expire), and
      leave unacked what follows a failure in its group; each crashes now and then right after a
      receive ("fifo-crash": dropped without acking what it holds, a new consumer in its place);
    - a reader of DLQ_TOPIC records every dead letter ("dlq-receive") and acks it.

    `stop()` stops the sends and drains: consumers fail only poison values and crash no more,
    until every acknowledged send and every message received is acked or dead-lettered, or
    DRAIN_IDLE_S without one settled ("fifo-drain"). C12 judges the history."""

    def __init__(self, endpoints: str, history: History, seed: int, credentials: Signing | None = None) -> None:
        super().__init__(endpoints, history, seed, credentials)
        self._consumers_ended = threading.Event()  # set by halt once it waited for the consumers
        self._reader_deadline = math.inf  # halt's: the DLQ reader stops then, even if the cluster does not answer
        self._sent: set[str] = set()  # acknowledged sends
        self._received: set[str] = set()
        self._settled: set[str] = set()  # acked (or maybe acked) by a consumer, or read from the DLQ

    def start(self) -> None:
        """Start each client (the cluster is whole yet) and its thread, the consumers first."""
        for index in range(FIFO_CONSUMERS):
            self._spawn(f"fifo-c{index}", self._consume, index,
                        self._started(self._simple_consumer(FIFO_GROUP, FIFO_TOPIC)))
        self._spawn(DLQ_READER, self._read_dead_letters,
                    self._started(self._simple_consumer(DLQ_READER_GROUP, DLQ_TOPIC)))
        for index in range(FIFO_PRODUCERS):
            self._spawn(f"fifo-p{index}", self._produce, index,
                        self._started(self._producer((FIFO_TOPIC,))))

    def halt(self, timeout: float = 30.0) -> None:
        """Stop every thread, the DLQ reader last: a consumer's receive still in flight may
        dead-letter a message (a lease spent), which the reader must still record."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        readers = [thread for thread in self._threads if thread.name == DLQ_READER]
        for thread in self._threads:
            if thread not in readers:
                thread.join(max(0.0, deadline - time.monotonic()))
        self._reader_deadline = deadline - SEND_TIMEOUT_S - 1  # its last receive ends within the timeout
        self._consumers_ended.set()
        for thread in readers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _drain(self) -> None:
        op = self.history.invoke("fifo", "fifo-drain", None)
        started = time.monotonic()
        unsettled, idle_until = self._unsettled(), started + DRAIN_IDLE_S
        while unsettled and time.monotonic() < min(idle_until, started + DRAIN_TIMEOUT_S) and self.error is None:
            time.sleep(DRAIN_POLL_S)
            if self._unsettled() < unsettled:
                unsettled, idle_until = self._unsettled(), time.monotonic() + DRAIN_IDLE_S
        if self._unsettled():
            self.history.info(op, "timeout", unsettled=self._unsettled())
        else:
            self.history.ok(op)

    def _unsettled(self) -> int:
        with self._lock:
            return len((self._sent | self._received) - self._settled)

    def _produce(self, index: int, producer: OfficialProducer) -> None:
        name = f"fifo-p{index}"
        sequences = dict.fromkeys(range(index, MESSAGE_GROUPS, FIFO_PRODUCERS), 0)
        try:
            for group in itertools.cycle(sequences):
                while self._unsettled() >= FIFO_BACKLOG_MAX and not (self._draining.is_set() or self._stop.is_set()):
                    time.sleep(RETRY_PAUSE_S)
                if self._draining.is_set() or self._stop.is_set():
                    return
                if self._send(producer, name, group, f"g{group}-{sequences[group]}"):
                    sequences[group] += 1
                else:  # sent again at the group's next turn; the other groups go on meanwhile
                    time.sleep(RETRY_PAUSE_S)
        finally:
            producer.shutdown()

    def _send(self, producer: OfficialProducer, name: str, group: int, value: str) -> bool:
        """One send, recorded; whether it was acknowledged or refused."""
        message = OfficialMessage()
        message.topic, message.body, message.message_group = FIFO_TOPIC, value.encode(), f"g{group}"
        outcome = self._recorded_send(self.history.invoke(name, "fifo-send", value), producer, message)
        if outcome == "ok":
            with self._lock:
                self._sent.add(value)
        return outcome != "info"

    def _receive(self, consumer: SimpleConsumer, name: str, f: str) -> list | None:
        """One receive, recorded as `f`: its messages, or None when it got no answer."""
        op = self.history.invoke(name, f, {"group": consumer.consumer_group}, invisible_s=FIFO_INVISIBLE_S)
        try:
            messages = consumer.receive(FIFO_BATCH, FIFO_INVISIBLE_S)
        except Exception as error:  # noqa: BLE001 - unless it reached no broker, it may have leased messages
            (self.history.fail if _unreached(error) else self.history.info)(op, _error_name(error))
            time.sleep(RETRY_PAUSE_S)
            return None
        self.history.ok(op, messages=[{"value": m.body.decode(), "id": m.message_id, "queue": m.queue_id,
                                       "offset": m.queue_offset, "attempt": m.delivery_attempt} for m in messages])
        return messages

    def _consume(self, index: int, consumer: SimpleConsumer | None) -> None:
        rng = random.Random(f"{self.seed}-{index}")
        for generation in itertools.count():
            if consumer is None:
                return
            name = f"fifo-c{index}.{generation}"
            crash_at = time.monotonic() + rng.uniform(*CRASH_EVERY_S)
            crash = None
            try:
                while not self._stop.is_set():
                    messages = self._receive(consumer, name, "fifo-receive")
                    if not messages:
                        continue
                    with self._lock:
                        self._received.update(m.body.decode() for m in messages)
                    if time.monotonic() >= crash_at and not self._draining.is_set():
                        crash = self.history.invoke(name, "fifo-crash", name, held=[m.body.decode() for m in messages])
                        break
                    self._process(consumer, name, messages, rng)
            finally:
                consumer.shutdown()
            if crash is None:
                return
            consumer = self._restarted(lambda: self._simple_consumer(FIFO_GROUP, FIFO_TOPIC))
            self.history.ok(crash)

    def _process(self, consumer: SimpleConsumer, name: str, messages: list, rng: random.Random) -> None:
        """Each message group's messages in the order received: ack, or fail and leave the rest
        of the group unacked (they come back behind the failed one)."""
        failed: set[str] = set()
        for message in messages:
            value = message.body.decode()
            group = value.rpartition("-")[0]
            if group in failed:
                continue
            poison = _poison(value)
            if poison or (not self._draining.is_set() and rng.random() < FAIL_RATE):
                failed.add(group)
                self._fail(consumer, name, message, value, poison, rng)
            else:
                self._ack(consumer, name, message, value)

    def _ack(self, consumer: SimpleConsumer, name: str, message, value: str) -> None:
        op = self.history.invoke(name, "fifo-ack", value, id=message.message_id)
        try:
            consumer.ack(message)
        except Exception as error:  # noqa: BLE001 - unless refused (e.g. the lease had expired), it may have landed
            if self._changed_nothing(op, error):
                return  # it comes back
        else:
            self.history.ok(op)
        with self._lock:
            self._settled.add(value)

    def _fail(self, consumer: SimpleConsumer, name: str, message, value: str, poison: bool,
              rng: random.Random) -> None:
        """Fail one delivery: give it back at once (ChangeInvisibleDuration), or let its lease
        expire; in the drain always the first, to end sooner."""
        how = "nack" if self._draining.is_set() or rng.random() < 0.5 else "expire"
        op = self.history.invoke(name, "fifo-fail", value, id=message.message_id, how=how, poison=poison)
        if how == "expire":
            self.history.ok(op)
            return
        try:
            consumer.change_invisible_duration(message, NACK_INVISIBLE_S)
        except Exception as error:  # noqa: BLE001 - recorded
            self._changed_nothing(op, error)
        else:
            self.history.ok(op)

    def _changed_nothing(self, op: int, error: Exception) -> bool:
        """Record an ack's or a nack's error: fail when it was refused or reached no broker, else
        info (it may have landed); whether it was fail."""
        certain = isinstance(error, OFFICIAL_REFUSALS) or _unreached(error)
        (self.history.fail if certain else self.history.info)(op, _error_name(error))
        return certain

    def _read_dead_letters(self, consumer: SimpleConsumer) -> None:
        try:
            while True:
                last = self._consumers_ended.is_set()  # a receive begun after them finds every dead letter
                messages = self._receive(consumer, DLQ_READER, "dlq-receive")
                if last and (messages == [] or time.monotonic() >= self._reader_deadline):
                    return
                with self._lock:
                    self._settled.update(m.body.decode() for m in messages or ())
                for message in messages or ():
                    try:
                        consumer.ack(message)
                    except Exception:  # noqa: BLE001 - it comes back and is recorded again
                        pass
        finally:
            consumer.shutdown()


TIMER_TOPIC = "ChaosTimers"
ORDER_TOPIC = "ChaosOrders"
TIMER_QUEUES = 4
TIMER_GROUP = "chaos-timers"
ORDER_GROUP = "chaos-orders"
# The brokers check an undecided transaction 2 s after it began and every 2 s after (RocketMQ's
# defaults, 6 s and 30 s, would leave few checks to a 180 s run), and give up only after 100 checks
# (200 s, past any run's faults; the default 15 could give up under F13's run of faults, which C14
# could not tell from a half message the broker forgot).
TIMER_TX_SETS = {"transactionTimeOut": "2000", "transactionCheckInterval": "2000", "transactionCheckMax": "100"}
TIMER_PRODUCERS = 2
ORDER_PRODUCERS = 2
TIMER_CONSUMERS = 2  # of each topic
TX_PRODUCER_LIFE_S = (10.0, 30.0)  # a transactional producer is replaced this long after it started (drawn)
TIMER_AHEAD_S = 60.0  # a timer is due up to this long after its send
TIMER_PAST_S = 10.0  # or, one time in ten, up to this long before it (delivered at once)
TIMER_PAST_CHANCE = 0.1
TIMER_PAUSE_S = 0.05  # between one producer's sends: about 15 timers a second each
TIMER_BATCH = 32
TIMER_INVISIBLE_S = 10
# A transaction's fate, in its value: the producer commits or rolls back at once, or leaves it to
# the broker's check, whose checker answers by the same rule (commit_intended), after answering
# UNKNOWN once for the "unknown-" ones.
FATES = ("commit", "rollback", "check-commit", "check-rollback", "unknown-commit", "unknown-rollback")
FATE_WEIGHTS = (3, 2, 1.5, 1.5, 1, 1)
# The drain ends once every acknowledged timer is this far past due and every timer and every
# transaction the consumers must see was received (and every undecided rolled-back one resolved),
# or at TIMER_DRAIN_TIMEOUT_S.
TIMER_DRAIN_MARGIN_S = 10.0
TIMER_DRAIN_TIMEOUT_S = TIMER_AHEAD_S + 60.0


class TimersUnsupported(Exception):
    """The cluster does not serve what W7 needs yet: delay topics and transactions."""


def prepare_timers(namesrv: str, cluster: str, broker: str, credentials: Signing | None = None) -> None:
    """W7's DELAY and TRANSACTION topics, made with the admin commands a user runs, and a look at
    whether `broker` serves EndTransaction. Raises TimersUnsupported when it does not yet,
    RuntimeError when an admin command failed."""
    for topic, kind in ((TIMER_TOPIC, "DELAY"), (ORDER_TOPIC, "TRANSACTION")):
        args = ("updateTopic", "-t", topic, "-r", TIMER_QUEUES, "-w", TIMER_QUEUES, "-a", f"+message.type={kind}")
        done = _setup_admin(namesrv, cluster, *args)
        if done.returncode != 0:
            raise RuntimeError(f"quorumq admin {' '.join(map(str, args))}: {done.stderr.strip()}")
    request = v5s.EndTransactionRequest(topic=v5.Resource(name=ORDER_TOPIC), message_id="probe",
                                        transaction_id="probe", resolution=v5.COMMIT, source=v5.SOURCE_CLIENT)
    with _v5_channel(broker) as channel:
        for tries_left in reversed(range(SETUP_TRIES)):
            try:
                answer = v5_grpc.MessagingServiceStub(channel).EndTransaction(request, timeout=SEND_TIMEOUT_S,
                                                                              metadata=_signed(credentials))
                break
            except grpc.RpcError:  # a loaded machine's broker late to answer, as in _setup_admin
                if not tries_left:
                    raise
    if answer.status.code in (Code.UNSUPPORTED, Code.NOT_IMPLEMENTED):
        raise TimersUnsupported(f"EndTransaction: {answer.status.message}")


class _RuleChecker(TransactionChecker):
    """A producer's TransactionChecker: answers by the transaction's fate in its body, UNKNOWN at
    the first check of an "unknown-" one (across the producers: any of them may be asked), and
    records each answer as a "tx-check" (its EndTransaction's outcome completes it)."""

    def __init__(self, workload: TimerWorkload, name: str) -> None:
        self.workload, self.name = workload, name
        self.pending: dict[str, list[int]] = defaultdict(list)  # message id -> ops awaiting their answer

    def check(self, message) -> int:
        value = message.body.decode()
        with self.workload._lock:
            first = value not in self.workload._asked
            self.workload._asked.add(value)
        if first and value.split("-", 2)[2].startswith("unknown"):
            answer = v5.TRANSACTION_RESOLUTION_UNSPECIFIED
        else:
            answer = v5.COMMIT if commit_intended(value) else v5.ROLLBACK
        resolution = {v5.COMMIT: "commit", v5.ROLLBACK: "rollback"}.get(answer, "unknown")
        op = self.workload.history.invoke(self.name, "tx-check", value, resolution=resolution)
        with self.workload._lock:
            self.pending[message.message_id].append(op)
        return answer


class _CheckedProducer(OfficialProducer):
    """The official producer, with the outcome of each EndTransaction its checker's answer sent
    recorded (the client only logs it)."""

    def __init__(self, config: ClientConfiguration, topics: tuple[str, ...], checker: _RuleChecker,
                 tls_enable: bool) -> None:
        super().__init__(config, topics, checker, tls_enable)
        self.checker = checker

    def _Producer__server_transaction_check_callback(self, future, message, transaction_id, result) -> None:
        workload = self.checker.workload
        with workload._lock:
            op = self.checker.pending[message.message_id].pop(0)
        try:
            code = future.result().status.code
        except Exception as error:  # noqa: BLE001 - unless it reached no broker, it may have landed
            code, certain, error_name = None, _unreached(error), _error_name(error)
        else:  # a refusal too may follow a try that landed (see _decide)
            certain, error_name = False, Code.Name(code)
        if code == Code.OK:
            workload.history.ok(op)
        else:
            (workload.history.fail if certain else workload.history.info)(op, error_name)
        if result == v5.ROLLBACK and not certain:
            with workload._lock:
                workload._rolled_back.add(message.body.decode())


class TimerWorkload(OfficialWorkload):
    """W7, with the official client, in threads of its own (its calls block):

    - TIMER_PRODUCERS producers send timers "d<i>-<seq>" to TIMER_TOPIC, one at a time, each due
      (delivery_timestamp, wall ms) up to TIMER_AHEAD_S ahead or, now and then, up to TIMER_PAST_S
      before the send ("timer-send": the invocation carries deliver_ms, ok the wall time of the ack);
    - ORDER_PRODUCERS transactional producers send "x<i>-<seq>-<fate>" to ORDER_TOPIC as half
      messages ("tx-send") and commit or roll back at once ("tx-end") or leave it to the broker's
      check, which each producer's checker answers by the fate ("tx-check"); each producer is
      replaced by a new one now and then (_transact);
    - TIMER_CONSUMERS SimpleConsumers of each topic receive ("timer-receive", "tx-receive": each
      message's value, id, queue, offset, attempt and delivery timestamp, and the client's wall
      time when the receive returned) and ack what they receive.

    `stop()` stops the sends and drains (the transactional producers stay to answer checks)
    until every acknowledged timer is TIMER_DRAIN_MARGIN_S past due and every timer and committed
    transaction acknowledged was received and every undecided rolled-back one resolved, or
    TIMER_DRAIN_TIMEOUT_S ("timer-drain"). C13 and C14 judge the history."""

    def __init__(self, endpoints: str, history: History, seed: int, credentials: Signing | None = None) -> None:
        super().__init__(endpoints, history, seed, credentials)
        self._due: dict[str, int] = {}  # acknowledged timers: value -> delivery time, wall ms
        self._committing: set[str] = set()  # acknowledged half messages to be committed
        self._rolling_back: set[str] = set()  # acknowledged half messages to be rolled back
        self._rolled_back: set[str] = set()  # rolled back, or maybe (an unknown outcome)
        self._received: set[str] = set()
        self._asked: set[str] = set()  # transactions a checker was asked about

    def start(self) -> None:
        """Start each client (the cluster is whole yet) and its thread, the consumers first."""
        for topic, group, f in ((TIMER_TOPIC, TIMER_GROUP, "timer-receive"), (ORDER_TOPIC, ORDER_GROUP, "tx-receive")):
            for index in range(TIMER_CONSUMERS):
                self._spawn(f"{group}-c{index}", self._consume, f, self._started(self._simple_consumer(group, topic)))
        for index in range(ORDER_PRODUCERS):
            checker = _RuleChecker(self, f"tx-p{index}")
            self._spawn(checker.name, self._transact, index,
                        self._started(_CheckedProducer(self.config, (ORDER_TOPIC,), checker, self.tls)))
        for index in range(TIMER_PRODUCERS):
            self._spawn(f"timer-p{index}", self._send_timers, index,
                        self._started(self._producer((TIMER_TOPIC,))))

    def _drain(self) -> None:
        op = self.history.invoke("timers", "timer-drain", None)
        deadline = time.monotonic() + TIMER_DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and self.error is None and not self._drained():
            time.sleep(DRAIN_POLL_S)
        if self._drained():
            self.history.ok(op)
        else:
            self.history.info(op, "timeout", unsettled=self._unsettled())

    def _unsettled(self) -> int:
        with self._lock:
            return (len(set(self._due) - self._received) + len(self._committing - self._received)
                    + len(self._rolling_back - self._rolled_back))

    def _drained(self) -> bool:
        with self._lock:
            last_due_ms = max(self._due.values(), default=0)
        return not self._unsettled() and _wall_ms() >= last_due_ms + TIMER_DRAIN_MARGIN_S * 1000

    def _send_timers(self, index: int, producer: OfficialProducer) -> None:
        name = f"timer-p{index}"
        rng = random.Random(f"{self.seed}-{name}")
        try:
            for sequence in itertools.count():
                if self._draining.is_set() or self._stop.is_set():
                    return
                past = rng.random() < TIMER_PAST_CHANCE
                ahead_s = -rng.uniform(0, TIMER_PAST_S) if past else rng.uniform(0, TIMER_AHEAD_S)
                value, deliver_ms = f"d{index}-{sequence}", _wall_ms() + round(ahead_s * 1000)
                message = OfficialMessage()
                message.topic, message.body, message.delivery_timestamp = TIMER_TOPIC, value.encode(), deliver_ms
                op = self.history.invoke(name, "timer-send", value, deliver_ms=deliver_ms)
                if self._recorded_send(op, producer, message) == "ok":
                    with self._lock:
                        self._due[value] = deliver_ms
                time.sleep(TIMER_PAUSE_S)
        finally:
            producer.shutdown()

    def _transact(self, index: int, producer: _CheckedProducer | None) -> None:
        """Transactions until the drain; each producer is replaced by a new one (and its thread's
        checker goes with it) TX_PRODUCER_LIFE_S after it started, through the drain too, until
        halted ("tx-restart"). The official client opens a broker's Telemetry stream again only
        when a route names a broker it did not know, or when a settings write fails (every 300 s),
        so after a failover back to a master it knew, no producer of its could be asked a check
        (F1 seed 7002 left 200 undecided: the broker found "no live producer to check with"); a
        new producer opens one to its route's master, as an application restarted would, and the
        broker asks it about the transactions the old one left."""
        name = f"tx-p{index}"
        checker = producer.checker if producer else None
        rng = random.Random(f"{self.seed}-{name}")
        sequences = itertools.count()
        for generation in itertools.count(1):
            if producer is None:
                return
            replace_at = time.monotonic() + rng.uniform(*TX_PRODUCER_LIFE_S)
            try:
                while not self._stop.is_set() and time.monotonic() < replace_at:
                    if self._draining.is_set():
                        self._stop.wait(max(0.0, replace_at - time.monotonic()))
                    else:
                        self._transaction(name, f"x{index}-{next(sequences)}", rng, producer)
                        time.sleep(TIMER_PAUSE_S)
            finally:
                producer.shutdown()
            if self._stop.is_set():
                return
            op = self.history.invoke(name, "tx-restart", generation)
            producer = self._restarted(lambda: _CheckedProducer(self.config, (ORDER_TOPIC,), checker, self.tls))
            self.history.ok(op)

    def _transaction(self, name: str, key: str, rng: random.Random, producer: _CheckedProducer) -> None:
        """One transaction "<key>-<fate>": its half message, then the producer's decision or none."""
        fate = rng.choices(FATES, FATE_WEIGHTS)[0]
        value = f"{key}-{fate}"
        message = OfficialMessage()
        message.topic, message.body = ORDER_TOPIC, value.encode()
        transaction = producer.begin_transaction()
        if self._recorded_send(self.history.invoke(name, "tx-send", value), producer, message, transaction) == "ok":
            with self._lock:
                (self._committing if commit_intended(value) else self._rolling_back).add(value)
            if fate in ("commit", "rollback"):
                self._decide(name, value, transaction, fate)

    def _decide(self, name: str, value: str, transaction, fate: str) -> None:
        op = self.history.invoke(name, "tx-end", value, resolution=fate)
        try:
            transaction.commit() if fate == "commit" else transaction.rollback()
        except Exception as error:  # noqa: BLE001 - unless it reached no broker, it may have landed
            # Even INVALID_TRANSACTION_ID: v5 gives that code to TRANSACTION_ALREADY_ENDED too, which
            # a replica forwarding the decision answers when the master applied it, died before the
            # answer, and the replica asked the new master again (F10 seed 7008: the rollback of
            # x1-121 in every log, the producer told INVALID_TRANSACTION_ID).
            certain = _unreached(error)
            (self.history.fail if certain else self.history.info)(op, _error_name(error))
            if certain:
                return
        else:
            self.history.ok(op)
        if fate == "rollback":
            with self._lock:
                self._rolled_back.add(value)

    def _consume(self, f: str, consumer: SimpleConsumer) -> None:
        """Receive and ack until halted; an ack that fails leaves the message to come back."""
        name = threading.current_thread().name
        try:
            while not self._stop.is_set():
                op = self.history.invoke(name, f, {"group": consumer.consumer_group})
                try:
                    messages = consumer.receive(TIMER_BATCH, TIMER_INVISIBLE_S)
                except Exception as error:  # noqa: BLE001 - recorded; the next receive tries again
                    (self.history.fail if _unreached(error) else self.history.info)(op, _error_name(error))
                    time.sleep(RETRY_PAUSE_S)
                    continue
                self.history.ok(op, wall_ms=_wall_ms(), messages=[
                    {"value": m.body.decode(), "id": m.message_id, "queue": m.queue_id, "offset": m.queue_offset,
                     "attempt": m.delivery_attempt, "deliver_ms": m.delivery_timestamp} for m in messages])
                with self._lock:
                    self._received.update(m.body.decode() for m in messages)
                for message in messages:
                    try:
                        consumer.ack(message)
                    except Exception:  # noqa: BLE001 - it comes back and is counted as a redelivery
                        pass
        finally:
            consumer.shutdown()
