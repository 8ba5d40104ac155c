"""A master's transactional messages (core/transactions.py): the undecided half messages, their
decisions (EndTransaction), and the checks with a live producer of their topic.

The half and op topics are the state. A master reads both when it takes the role (at start, or
elected): every half message without an op record is undecided, kept in memory (at most
TRANSACTIONS_UNDECIDED_MAX); a slave keeps nothing, its log holds the records. A decision is an op
record, with a commit's copy of the half message to its real topic in the same write, admitted and
waited for as a send (SendPath.put_records); the half message is decided in the step that appends
it, so a second decision is refused. Checks are counted in memory: a new master checks an undecided
half message up to transactionCheckMax times again.

A producer is known by the topics of its Publishing settings (a v5 producer has no group), as
RocketMQ's proxy knows it: the endpoint registers each producer's Telemetry stream here, and a check
is a RecoverOrphanedTransactionCommand pushed on the stream of one live producer of the topic.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from quorumq import limits
from quorumq.broker.consumers import read_one
from quorumq.broker.master_task import MasterTask
from quorumq.broker.send_path import unparked
from quorumq.core import properties
from quorumq.core.put_status import PutStatus
from quorumq.core.transactions import (
    HALF_TOPIC,
    OP_TOPIC,
    Check,
    CheckRules,
    Decision,
    decode_op,
    decode_transaction_id,
    encode_op,
    encode_transaction_id,
    next_check,
)
from quorumq.errors import Error, QuorumqError
from quorumq.store import MessageIn, StoredMessage, walk_queue

log = logging.getLogger("quorumq.broker")

# A producer's Telemetry stream: push(half message as its real topic's message, transaction id).
Push = Callable[[StoredMessage, str], None]
_LOOK_INTERVAL_S = 1.0  # how often the checker looks for half messages to check (transactionTimeOut is seconds)


@dataclass(slots=True)
class _Undecided:
    # When the half message was stored and last checked, on the monotonic clock (a wall-clock jump
    # must neither hold a check back nor hurry it): a record read at load is as old as its store
    # timestamp says.
    stored_ms: int
    checks: int = 0
    last_check_ms: int | None = None


class Transactions:
    def __init__(self, broker) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker
        self._undecided: dict[int, _Undecided] = {}
        self._ready = False
        self._producers: dict[str, dict[int, Push]] = {}  # topic -> live producers' streams
        self._loop = MasterTask(self._run)
        self._turn = 0
        self.figures = {"transactionsCommitted": 0, "transactionsRolledBack": 0, "transactionChecks": 0,
                        "transactionChecksGivenUp": 0}

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        self._ready = False
        self._undecided = {}
        await self._loop.stop()

    @property
    def undecided(self) -> int:
        return len(self._undecided)

    def check_room(self) -> None:
        """A new half message fits among the undecided ones (the send path asks before it parks one)."""
        if len(self._undecided) >= limits.TRANSACTIONS_UNDECIDED_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"{limits.TRANSACTIONS_UNDECIDED_MAX} transactions are "
                                                        "undecided on this broker; end some first")

    def added(self, offset: int) -> None:
        """The send path appended a half message at `offset` (also while the master reads its
        topics: `_load` keeps what was added meanwhile)."""
        if self._loop.running:
            self._undecided[offset] = _Undecided(self._broker.clock.monotonic_ms())

    # Producers.

    def producer_opened(self, topics: list[str], push: Push) -> None:
        for topic in topics:
            self._producers.setdefault(topic, {})[id(push)] = push

    def producer_closed(self, topics: list[str], push: Push) -> None:
        for topic in topics:
            streams = self._producers.get(topic, {})
            streams.pop(id(push), None)
            if not streams:
                self._producers.pop(topic, None)

    # Decisions.

    async def end(self, topic: str, message_id: str, transaction_id: str, decision: Decision | None,
                  answer_by: float | None) -> None:
        """A producer's decision on a half message (EndTransaction); None: it does not know yet (a
        check answered UNKNOWN), which changes nothing."""
        offset = decode_transaction_id(transaction_id)
        self._broker.sends.check_role()
        if not self._ready:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, "the master is reading its transactions; retry shortly")
        half = read_one(self._broker.store, HALF_TOPIC, 0, offset)
        if (half is None or half.properties.get(properties.MESSAGE_ID) != message_id
                or half.properties.get(properties.REAL_TOPIC) != topic):
            raise QuorumqError(Error.INVALID_TRANSACTION_ID, f"no half message {message_id} of topic {topic} has "
                                                             f"transaction id {transaction_id}")
        if offset not in self._undecided:
            raise QuorumqError(Error.TRANSACTION_ALREADY_ENDED, f"transaction {transaction_id} of message "
                                                                f"{message_id} has already ended")
        if decision is None:
            log.info("transaction %s of message %s: its producer does not know yet", transaction_id, message_id)
            return
        status = await self._decide(offset, half, decision, answer_by)
        self.figures["transactionsCommitted" if decision is Decision.COMMIT else "transactionsRolledBack"] += 1
        if status is not PutStatus.PUT_OK:
            raise QuorumqError(Error.SLAVE_PERSISTENCE_TIMEOUT, f"transaction {transaction_id} ended here, but the "
                                                                f"decision is not held as a send needs: {status.value}")

    async def _decide(self, offset: int, half: StoredMessage, decision: Decision,
                      answer_by: float | None) -> PutStatus:
        broker = self._broker
        copies = [self._broker.sends.unpark(half)] if decision is Decision.COMMIT else []
        op = MessageIn(topic=OP_TOPIC, queue_id=0, body=encode_op(offset, decision), properties={},
                       born_timestamp_ms=broker.clock.now_ms(), born_host=broker.address)
        return await broker.sends.put_records(copies + [op], lambda appended: self._undecided.pop(offset, None),
                                              answer_by)


    # The state, and the checks.

    async def _run(self) -> None:
        while True:
            try:
                if not self._ready:
                    await self._load()
                await self._check_all()
            except QuorumqError as error:
                log.warning("transaction checks not done now, tried again: %s", error)
            except Exception:  # a defect: said loudly, and the checks go on
                log.exception("the transaction checker failed; it goes on")
            await asyncio.sleep(_LOOK_INTERVAL_S)

    async def _load(self) -> None:
        """The undecided half messages: every half message without an op record."""
        clock = self._broker.clock
        started = clock.monotonic()
        undecided: dict[int, _Undecided] = {}
        async for message in self._records(HALF_TOPIC):
            age_ms = max(clock.now_ms() - message.store_timestamp_ms, 0)
            undecided[message.queue_offset] = _Undecided(clock.monotonic_ms() - age_ms)
        async for message in self._records(OP_TOPIC):
            try:
                offset, _ = decode_op(message.body)
            except ValueError as exc:
                log.error("transaction op record at %d skipped: %s", message.queue_offset, exc)
                continue
            undecided.pop(offset, None)
        # Half messages appended meanwhile (`added`) are undecided too: decisions wait for the load.
        self._undecided, self._ready = {**undecided, **self._undecided}, True
        log.info("transactions read in %.3f s: %d undecided", self._broker.clock.monotonic() - started,
                 len(undecided))

    async def _records(self, topic: str):
        store = self._broker.store
        for result in walk_queue(store, topic, 0, store.queue_min_offset(topic, 0)):
            for message in result.messages:
                yield message
            await asyncio.sleep(0)

    async def _check_all(self) -> None:
        config = self._broker.config
        rules = CheckRules(config["transactionTimeOut"], config["transactionCheckInterval"],
                           config["transactionCheckMax"])
        now = self._broker.clock.monotonic_ms()
        for offset, state in list(self._undecided.items()):
            action = next_check(state.stored_ms, state.checks, state.last_check_ms, now, rules)
            if action is Check.WAIT or offset not in self._undecided:
                continue
            half = read_one(self._broker.store, HALF_TOPIC, 0, offset)
            if half is None:  # retention took it
                self._undecided.pop(offset, None)
                continue
            if action is Check.GIVE_UP:
                self.figures["transactionChecksGivenUp"] += 1
                log.warning("transaction %s of message %s (topic %s) given up after %d checks: never visible",
                            encode_transaction_id(offset), half.properties.get(properties.MESSAGE_ID),
                            half.properties.get(properties.REAL_TOPIC), state.checks)
                await self._decide(offset, half, Decision.DISCARD, None)
                continue
            state.checks += 1
            state.last_check_ms = now
            self._ask(half, offset)

    def _ask(self, half: StoredMessage, offset: int) -> None:
        """Push a check to one live producer of the half message's topic, in turn."""
        message = unparked(half)
        streams = list(self._producers.get(message.topic, {}).values())
        self.figures["transactionChecks"] += 1
        if not streams:
            log.debug("transaction %s of topic %s: no live producer to check with", encode_transaction_id(offset),
                     message.topic)
            return
        self._turn += 1
        as_real = replace(half, topic=message.topic, queue_id=message.queue_id, properties=dict(message.properties))
        streams[self._turn % len(streams)](as_real, encode_transaction_id(offset))
