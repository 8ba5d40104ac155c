"""Subscription groups: RocketMQ's SubscriptionGroupConfig, the fields quorumq serves, and its
GroupRetryPolicy, with the rules an admin's input must keep (pure; no I/O).

A group is stored, copied to slaves and shown in RocketMQ's JSON shape (`group_data`), and the
retry policy an admin gives (`updateSubGroup -p`) is the same JSON as RocketMQ's mqadmin takes:
`{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":7200000,"multiplier":2}}` or
`{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,5000,10000]}}`.
"""

import json
import math
from dataclasses import dataclass, field
from typing import Any

from quorumq import limits
from quorumq.core.message_rules import check_group_name, quoted
from quorumq.errors import Error, QuorumqError

CUSTOMIZED = "CUSTOMIZED"
EXPONENTIAL = "EXPONENTIAL"
_SECOND_MS = 1000
_MINUTE_MS = 60 * _SECOND_MS
_HOUR_MS = 60 * _MINUTE_MS
# RocketMQ's CustomizedRetryPolicy default: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
DEFAULT_BACKOFFS_MS = (1 * _SECOND_MS, 5 * _SECOND_MS, 10 * _SECOND_MS, 30 * _SECOND_MS,
                       *(minutes * _MINUTE_MS for minutes in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
                       1 * _HOUR_MS, 2 * _HOUR_MS)
# RocketMQ's ExponentialRetryPolicy defaults.
EXPONENTIAL_INITIAL_MS = 5000
EXPONENTIAL_MAX_MS = 7_200_000
EXPONENTIAL_MULTIPLIER = 2.0
RETRY_MAX_TIMES_DEFAULT = 16
# A back-off is the invisible time a consumer asks for before the next attempt
# (ChangeInvisibleDuration), so it keeps to the invisible time's bounds.
BACKOFF_MS_MIN = int(limits.INVISIBLE_SECONDS_MIN * 1000)
BACKOFF_MS_MAX = int(limits.INVISIBLE_SECONDS_MAX * 1000)


def _policy_error(detail: str) -> QuorumqError:
    return QuorumqError(Error.ILLEGAL_RETRY_POLICY, detail)


def _check_backoff(value: int, what: str) -> None:
    if not BACKOFF_MS_MIN <= value <= BACKOFF_MS_MAX:
        raise _policy_error(f"{what} {value} ms is outside {BACKOFF_MS_MIN}..{BACKOFF_MS_MAX} ms "
                            "(a back-off is an invisible time)")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """RocketMQ's GroupRetryPolicy: a customized list of back-offs or an exponential one."""
    kind: str  # CUSTOMIZED | EXPONENTIAL
    next_ms: tuple[int, ...] = DEFAULT_BACKOFFS_MS  # CUSTOMIZED: before retry 1, 2, ...; the last repeats
    initial_ms: int = EXPONENTIAL_INITIAL_MS  # EXPONENTIAL
    max_ms: int = EXPONENTIAL_MAX_MS
    multiplier: float = EXPONENTIAL_MULTIPLIER

    def __post_init__(self) -> None:
        if self.kind == CUSTOMIZED:
            if not 0 < len(self.next_ms) <= limits.RETRY_BACKOFFS_MAX:
                raise _policy_error(f"a customized policy lists 1..{limits.RETRY_BACKOFFS_MAX} back-offs, "
                                    f"not {len(self.next_ms)}")
            for backoff in self.next_ms:
                _check_backoff(backoff, "back-off")
        elif self.kind == EXPONENTIAL:
            _check_backoff(self.initial_ms, "initial back-off")
            _check_backoff(self.max_ms, "max back-off")
            if self.max_ms < self.initial_ms:
                raise _policy_error(f"max back-off {self.max_ms} ms is below the initial {self.initial_ms} ms")
            if not (math.isfinite(self.multiplier) and self.multiplier >= 1):
                raise _policy_error(f"multiplier {self.multiplier} is not a finite number of at least 1")
        else:
            raise _policy_error(f"retry policy type {quoted(self.kind)} is neither {CUSTOMIZED} nor {EXPONENTIAL}")


DEFAULT_RETRY_POLICY = RetryPolicy(CUSTOMIZED)


def _check_retry_max_times(value: Any) -> None:
    if type(value) is not int or not 0 <= value <= limits.RETRY_MAX_TIMES_MAX:
        raise QuorumqError(Error.ILLEGAL_RETRY_MAX_TIMES,
                           f"retryMaxTimes {quoted(str(value))} is outside 0..{limits.RETRY_MAX_TIMES_MAX}")


@dataclass(frozen=True, slots=True)
class SubscriptionGroup:
    """RocketMQ's SubscriptionGroupConfig, the fields quorumq serves, with RocketMQ's defaults."""
    name: str
    consume_enable: bool = True
    consume_message_orderly: bool = False  # the group is FIFO (on FIFO topics)
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT  # redeliveries: at most retry_max_times + 1 deliveries
    retry_policy: RetryPolicy = field(default=DEFAULT_RETRY_POLICY)

    def __post_init__(self) -> None:
        check_group_name(self.name)
        _check_retry_max_times(self.retry_max_times)

    @property
    def max_attempts(self) -> int:
        """The most deliveries a message gets (the Telemetry back-off policy's max_attempts)."""
        return self.retry_max_times + 1


# RocketMQ's JSON names.
_POLICY_KEYS = {"type", "customizedRetryPolicy", "exponentialRetryPolicy"}
_CUSTOMIZED_KEYS = {"next"}
_EXPONENTIAL_KEYS = {"initial", "max", "multiplier"}
_GROUP_KEYS = {"groupName", "consumeEnable", "consumeMessageOrderly", "retryMaxTimes", "groupRetryPolicy"}


def _object(data: Any, keys: set[str], what: str, error: Error = Error.ILLEGAL_RETRY_POLICY) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise QuorumqError(error, f"{what} must be a JSON object")
    unknown = sorted(set(data) - keys)
    if unknown:
        raise QuorumqError(error, f"{what} has unknown field(s) {', '.join(quoted(str(key)) for key in unknown)}; "
                                  f"it takes {', '.join(sorted(keys))}")
    return data


def _milliseconds(value: Any, what: str) -> int:
    if type(value) is not int:
        raise _policy_error(f"{what} must be a whole number of milliseconds, not {quoted(json.dumps(value))}")
    return value


def retry_policy_from_data(data: Any) -> RetryPolicy:
    """A GroupRetryPolicy from its JSON data; what it leaves out takes RocketMQ's defaults."""
    policy = _object(data, _POLICY_KEYS, "a retry policy")
    kind = policy.get("type", CUSTOMIZED)
    if kind == CUSTOMIZED:
        customized = _object(policy.get("customizedRetryPolicy") or {}, _CUSTOMIZED_KEYS, "customizedRetryPolicy")
        backoffs = customized.get("next", list(DEFAULT_BACKOFFS_MS))
        if not isinstance(backoffs, list):
            raise _policy_error("customizedRetryPolicy.next must be a list of milliseconds")
        return RetryPolicy(CUSTOMIZED, next_ms=tuple(_milliseconds(value, "a back-off") for value in backoffs))
    if kind == EXPONENTIAL:
        exponential = _object(policy.get("exponentialRetryPolicy") or {}, _EXPONENTIAL_KEYS, "exponentialRetryPolicy")
        multiplier = exponential.get("multiplier", EXPONENTIAL_MULTIPLIER)
        if type(multiplier) not in (int, float):
            raise _policy_error(f"multiplier must be a number, not {quoted(json.dumps(multiplier))}")
        return RetryPolicy(EXPONENTIAL,
                           initial_ms=_milliseconds(exponential.get("initial", EXPONENTIAL_INITIAL_MS), "initial"),
                           max_ms=_milliseconds(exponential.get("max", EXPONENTIAL_MAX_MS), "max"),
                           multiplier=float(multiplier))
    raise _policy_error(f"retry policy type {quoted(str(kind))} is neither {CUSTOMIZED} nor {EXPONENTIAL}")


def retry_policy_from_json(text: str) -> RetryPolicy:
    """The policy `updateSubGroup -p` gives, as RocketMQ's mqadmin takes it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _policy_error(f"retry policy {quoted(text)} is not JSON: {exc}") from None
    return retry_policy_from_data(data)


def retry_policy_data(policy: RetryPolicy) -> dict[str, Any]:
    """RocketMQ's JSON of a GroupRetryPolicy."""
    if policy.kind == CUSTOMIZED:
        return {"type": CUSTOMIZED, "customizedRetryPolicy": {"next": list(policy.next_ms)}}
    multiplier = int(policy.multiplier) if policy.multiplier.is_integer() else policy.multiplier
    return {"type": EXPONENTIAL, "exponentialRetryPolicy": {
        "initial": policy.initial_ms, "max": policy.max_ms, "multiplier": multiplier}}


def group_data(group: SubscriptionGroup) -> dict[str, Any]:
    """RocketMQ's JSON of a SubscriptionGroupConfig (its names), the fields quorumq serves."""
    return {"groupName": group.name, "consumeEnable": group.consume_enable,
            "consumeMessageOrderly": group.consume_message_orderly, "retryMaxTimes": group.retry_max_times,
            "groupRetryPolicy": retry_policy_data(group.retry_policy)}


def group_from_data(data: Any) -> SubscriptionGroup:
    """A group from its JSON (`group_data`); raises its catalogue error on data that is not one."""
    fields = _object(data, _GROUP_KEYS, "a subscription group", Error.BAD_REQUEST)
    for key in ("consumeEnable", "consumeMessageOrderly"):
        if key in fields and type(fields[key]) is not bool:
            raise QuorumqError(Error.BAD_REQUEST, f"{key} must be true or false")
    return SubscriptionGroup(
        name=str(fields.get("groupName", "")),
        consume_enable=fields.get("consumeEnable", True),
        consume_message_orderly=fields.get("consumeMessageOrderly", False),
        retry_max_times=fields.get("retryMaxTimes", RETRY_MAX_TIMES_DEFAULT),
        retry_policy=retry_policy_from_data(fields.get("groupRetryPolicy") or {}))


def parse_bool(text: str, what: str) -> bool:
    """An admin's true/false. mqadmin reads anything but "true" as false; a typo must not turn a
    group off, so anything but true or false is refused."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise QuorumqError(Error.BAD_REQUEST, f"{what} must be true or false, not {quoted(text)}")
    return lowered == "true"


def parse_retry_max_times(text: str) -> int:
    """An admin's `-r`."""
    try:
        value: int | str = int(text.strip())
    except ValueError:
        value = text
    _check_retry_max_times(value)
    return int(value)
