"""Transactional messages, the pure part: the system topics' records, the transaction id, and when
an undecided half message is checked with its producer (no I/O).

A transactional message is stored as a half message in HALF_TOPIC (one queue), its real topic and
queue in its properties; a decision is an op record in OP_TOPIC naming the half message's offset.
A commit copies the half message to its real topic in the same write as its op record. The two
topics are the whole state: any replica rebuilds the undecided set from them (broker/transactions.py).
"""

from dataclasses import dataclass
from enum import Enum

from quorumq.errors import Error, QuorumqError

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # RocketMQ's names
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


class Decision(Enum):
    COMMIT = "c"
    ROLLBACK = "r"
    DISCARD = "d"  # given up after transactionCheckMax checks: never visible, as a rollback


def encode_op(offset: int, decision: Decision) -> bytes:
    return f"{offset} {decision.value}".encode()


def decode_op(body: bytes) -> tuple[int, Decision]:
    """(half message offset, decision) of an op record; ValueError when it does not parse."""
    offset, decision = body.decode().split(" ")
    return int(offset), Decision(decision)


def encode_transaction_id(offset: int) -> str:
    return f"{offset:x}"


def decode_transaction_id(transaction_id: str) -> int:
    """The half message offset a transaction id names; INVALID_TRANSACTION_ID when it does not parse."""
    try:
        offset = int(transaction_id, 16)
    except ValueError:
        offset = -1
    if offset < 0 or len(transaction_id) > 16:
        raise QuorumqError(Error.INVALID_TRANSACTION_ID, f"transaction id {transaction_id[:64]!r} does not parse")
    return offset


@dataclass(frozen=True, slots=True)
class CheckRules:
    timeout_ms: int  # transactionTimeOut: a half message younger than this is not checked
    interval_ms: int  # transactionCheckInterval: between two checks of one half message
    max_checks: int  # transactionCheckMax: then it is given up


class Check(Enum):
    WAIT = "wait"
    CHECK = "check"
    GIVE_UP = "give up"


def next_check(stored_ms: int, checks: int, last_check_ms: int | None, now_ms: int, rules: CheckRules) -> Check:
    """What to do now with an undecided half message stored at `stored_ms`, checked `checks` times
    (the last at `last_check_ms`): RocketMQ's rule, a first check once it is transactionTimeOut old,
    then one every transactionCheckInterval, and after transactionCheckMax checks it is given up."""
    if now_ms - stored_ms < rules.timeout_ms:
        return Check.WAIT
    if last_check_ms is not None and now_ms - last_check_ms < rules.interval_ms:
        return Check.WAIT
    return Check.GIVE_UP if checks >= rules.max_checks else Check.CHECK
