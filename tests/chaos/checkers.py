"""The checkers of the reliability spec (C1 to C8, C10, C11 for W4's topics, C12 for W6's FIFO
consumption, C13 and C14 for W7's timers and transactions, C15 for W8's users and rules) over a
run's history and the final read of every replica after healing. Pure: they read what they are
given and judge.

The final read maps each replica's name to {queue: [(offset, value), ...]} in offset order, the
final offsets each replica's name to the groups' committed offsets; `final_master` names the
replica whose contents count, `in_sync` the ones that must agree with it."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

FinalRead = dict[str, dict[str, list[tuple[int, str]]]]
FinalOffsets = dict[str, dict[tuple[str, int], int]]  # replica -> (group, queue id) -> committed offset
EXAMPLES_MAX = 10


@dataclass
class Result:
    name: str
    counts: dict[str, int]
    failures: tuple[str, ...]  # the counts that must be 0
    examples: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(self.counts[name] == 0 for name in self.failures)


def _examples(items: Iterable[Any]) -> list[Any]:
    return sorted(items, key=str)[:EXAMPLES_MAX]


def _completions(records: list[dict], f: str, kind: str) -> list[dict]:
    return [r for r in records if r["f"] == f and r["type"] == kind]


def _stored(read: dict[str, list[tuple[int, str]]]) -> dict[str, list[tuple[str, int]]]:
    """Each value's (queue, offset) places in one replica's read."""
    places: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for queue, messages in read.items():
        for offset, value in messages:
            places[value].append((queue, offset))
    return places


def lost(records: list[dict], final: FinalRead, final_master: str, in_sync: set[str]) -> Result:
    """C1: acknowledged sends missing from the final master, and from any in-sync replica."""
    acked = {r["value"] for r in _completions(records, "send", "ok")}
    missing = acked - set(_stored(final[final_master]))
    on_replicas = {(replica, value) for replica in in_sync for value in acked - set(_stored(final[replica]))}
    figures = {"acked": len(acked), "lost": len(missing), "lost on an in-sync replica": len(on_replicas)}
    return Result("C1 lost", figures,
                  ("lost", "lost on an in-sync replica"), _examples(missing | {v for _, v in on_replicas}))


def unexpected(records: list[dict], final: FinalRead) -> Result:
    """C2: values read that no send attempted; read values never acknowledged are "recovered"."""
    attempted = {r["value"] for r in records if r["f"] == "send" and r["type"] == "invoke"}
    acked = {r["value"] for r in _completions(records, "send", "ok")}
    read = {value for replica in final.values() for value in _stored(replica)}
    never_sent = read - attempted
    return Result("C2 unexpected", {"unexpected": len(never_sent), "recovered": len(read & attempted - acked)},
                  ("unexpected",), _examples(never_sent))


def inconsistent_offsets(records: list[dict], final: FinalRead) -> Result:
    """C3: one (queue, offset) with two values, across replicas and acknowledgements."""
    seen: dict[tuple[str, int], set[str]] = defaultdict(set)
    for replica in final.values():
        for queue, messages in replica.items():
            for offset, value in messages:
                seen[queue, offset].add(value)
    for r in _completions(records, "send", "ok"):
        seen[r["queue"], r["offset"]].add(r["value"])
    clashes = {place: values for place, values in seen.items() if len(values) > 1}
    return Result("C3 inconsistent offsets", {"inconsistent": len(clashes)}, ("inconsistent",),
                  _examples((place, sorted(values)) for place, values in clashes.items()))


def duplicates(records: list[dict], final: FinalRead, final_master: str) -> Result:
    """C4: every copy of a value past its first in the final master counts ("duplicates"). One is
    explained only by a send of the value that was made again as a new message: after an unknown
    or failed outcome, or inside the client after a request got no answer (its result counts the
    attempts). An idempotent producer's resends (W3) keep the message id, so none of its values
    may be stored twice; any other duplicate is a failure."""
    idempotent = {r["value"] for r in records if r["f"] == "send" and r["type"] == "invoke" and r.get("idempotent")}
    retried = {r["value"] for r in records if r["f"] == "send"
               and (r["type"] in ("info", "fail") or r.get("attempts", 1) > 1)} - idempotent
    stored = _stored(final[final_master])
    twice = {value for value, places in stored.items() if len(places) > 1}
    unexplained = twice - retried
    return Result("C4 duplicates", {"duplicates": sum(len(stored[value]) - 1 for value in twice),
                                    "explained": len(twice & retried), "unexplained": len(unexplained)},
                  ("unexplained",), _examples(unexplained))


def _producer_sequence(value: str) -> tuple[str, int]:
    producer, _, sequence = value.rpartition("-")
    return producer, int(sequence)


def order(records: list[dict], final: FinalRead, final_master: str) -> Result:
    """C5: a producer's acknowledged sends to one queue got increasing offsets in the order it made
    them, and each queue of the final master holds a producer's values in sequence order (a retry
    repeats a value, it never goes back)."""
    last_acked: dict[tuple[str, str], tuple[int, str]] = {}
    bad_acks = []
    for r in _completions(records, "send", "ok"):  # one send in flight per producer: ok order = send order
        key = (r["process"], r["queue"])
        if key in last_acked and last_acked[key][0] >= r["offset"]:
            bad_acks.append((last_acked[key][1], r["value"]))
        last_acked[key] = (r["offset"], r["value"])
    bad_reads = _out_of_sequence(final[final_master])
    return Result("C5 order", {"acks out of order": len(bad_acks), "stored out of order": len(bad_reads)},
                  ("acks out of order", "stored out of order"), _examples(bad_acks + bad_reads))


def _out_of_sequence(read: dict[str, list[tuple[int, str]]]) -> list[tuple[str, int, int]]:
    """(queue, offset, later offset) where a queue holds a producer's value after a later one of
    the same producer (a retry repeats a value, it never goes back)."""
    found = []
    for queue, messages in read.items():
        last: dict[str, tuple[int, int]] = {}
        for offset, value in messages:
            producer, sequence = _producer_sequence(value)
            if producer in last and last[producer][0] > sequence:
                found.append((queue, last[producer][1], offset))
            last[producer] = (sequence, offset)
    return found


def pipeline(records: list[dict], source: dict[str, list[tuple[int, str]]],
             standby: dict[str, list[tuple[int, str]]]) -> Result:
    """W5 under F14: the standby holds each message of the source exactly once (the replicator runs
    with --dedupe), so a value as many times as the source holds it (a resent value may be there
    twice) and an acknowledged one at least once; nothing it holds was never sent, and each of
    its queues holds a producer's values in sequence order."""
    attempted = {r["value"] for r in records if r["f"] == "send" and r["type"] == "invoke"}
    acked = {r["value"] for r in _completions(records, "send", "ok")}
    on_source, on_standby = _stored(source), _stored(standby)
    copies = {value: len(on_source.get(value, ())) or 1 for value in acked | set(on_source)}
    missing = {value for value, count in copies.items() if len(on_standby.get(value, ())) < count}
    twice = {value for value, places in on_standby.items() if len(places) > copies.get(value, 1)}
    never_sent = set(on_standby) - attempted
    disorder = _out_of_sequence(standby)
    return Result("W5 standby", {"acked": len(acked), "missing": len(missing), "twice": len(twice),
                                 "never sent": len(never_sent), "out of order": len(disorder)},
                  ("missing", "twice", "never sent", "out of order"),
                  _examples([*missing, *twice, *never_sent, *disorder]))


def translations(records: list[dict], source: dict[str, list[tuple[int, str]]],
                 standby: dict[str, list[tuple[int, str]]]) -> Result:
    """W5's checkpoint job under F14: the group's offsets the standby was seen to hold never go
    back, and never pass a message the group had not committed past on the source: the message
    just below a translated offset is, on the source, below a commit invoked before the offset
    was seen (invoked, since a commit that went unanswered may still have been applied)."""
    source_places = _stored(source)
    standby_values = {queue: dict(messages) for queue, messages in standby.items()}
    invoked: dict[tuple[str, int], int] = {}  # the highest commit invoked so far of (group, queue id)
    seen: dict[tuple[str, str], int] = {}  # the highest offset seen so far of (group, standby queue)
    checked, back, past = 0, [], []
    for r in records:
        if r["f"] == "commit" and r["type"] == "invoke":
            key = (r["value"]["group"], r["value"]["queue"])
            invoked[key] = max(r["value"]["offset"], invoked.get(key, 0))
        elif r["f"] == "translated" and r["type"] == "ok":
            group = r["value"]
            for queue, offset in r["offsets"].items():
                checked += 1
                if offset < seen.get((group, queue), 0):
                    back.append((group, queue, offset, seen[group, queue]))
                seen[group, queue] = max(offset, seen.get((group, queue), 0))
                if offset == 0:
                    continue
                value = standby_values.get(queue, {}).get(offset - 1)
                # A resent value may be stored twice on the source, in two queues: either copy will do.
                if not any(source_offset < invoked.get((group, int(source_queue.rsplit(":", 1)[1])), 0)
                           for source_queue, source_offset in source_places.get(value, [])):
                    past.append((group, queue, offset, value))
    return Result("W5 checkpoint", {"offsets seen": checked, "moved back": len(back),
                                    "past the source's commits": len(past)},
                  ("moved back", "past the source's commits"), _examples(back + past))


def commits(records: list[dict], final_offsets: FinalOffsets, in_sync: set[str]) -> Result:
    """C6: a group's committed offset of a queue never goes back: each acknowledged commit is at
    or past the ones acknowledged before it, a position read (where a consumer that takes a queue
    starts) is at or past every commit acknowledged before the read began, and after the heal
    every in-sync replica holds each group's offsets at or past its last acknowledged commit."""
    acked: dict[tuple[str, int], int] = {}  # the highest acknowledged commit of (group, queue)
    bounds: dict[int, int] = {}  # a position read's op -> the commit it must not fall below
    back = []
    for r in records:
        if r["f"] not in ("commit", "position"):
            continue
        key = (r["value"]["group"], r["value"]["queue"])
        if r["f"] == "position" and r["type"] == "invoke" and key in acked:
            bounds[r["op"]] = acked[key]
        elif r["f"] == "position" and r["type"] == "ok" and (r["offset"] or 0) < bounds.get(r["op"], 0):
            back.append((key, "position", r["offset"], bounds[r["op"]]))
        elif r["f"] == "commit" and r["type"] == "ok":
            offset = r["value"]["offset"]
            if offset < acked.get(key, 0):
                back.append((key, "commit", offset, acked[key]))
            acked[key] = max(offset, acked.get(key, 0))
    behind = [(replica, key, final_offsets[replica].get(key), offset) for replica in sorted(in_sync)
              for key, offset in acked.items() if final_offsets[replica].get(key, -1) < offset]
    count = sum(r["f"] == "commit" and r["type"] == "ok" for r in records)
    return Result("C6 commits", {"acknowledged commits": count, "moved back": len(back),
                                 "behind on an in-sync replica": len(behind)},
                  ("moved back", "behind on an in-sync replica"), _examples(back + behind))


def churn(records: list[dict], final: dict[str, FinalRead], final_master: str, in_sync: set[str]) -> Result:
    """C11 (W4): `final` holds each churned topic's final read. An acknowledged churn-send to a
    topic no delete-topic was invoked on since is on the final master ("lost"); a value whose send
    had ended before a delete-topic of its topic that every broker applied is on no in-sync
    replica ("came back": the deleted topic returned after a failover). A send still in flight
    when the delete began, or a delete with an unknown outcome, may go either way."""
    invoked = {r["op"]: r for r in records if r["type"] == "invoke"}
    deletes = [(invoked[r["op"]]["time"], r["value"]) for r in _completions(records, "delete-topic", "ok")]
    delete_invoked = [(r["time"], r["value"]) for r in records if r["f"] == "delete-topic" and r["type"] == "invoke"]
    ended = {r["value"]: r for r in records if r["f"] == "churn-send" and r["type"] != "invoke"}
    acked = [(invoked[r["op"]], r) for r in _completions(records, "churn-send", "ok")]

    def stored(replica: str, topic: str) -> set[str]:
        return set(_stored(final.get(topic, {}).get(replica, {})))

    missing = {started["value"] for started, _ in acked
               if not any(topic == started["topic"] and at > started["time"] for at, topic in delete_invoked)
               and started["value"] not in stored(final_master, started["topic"])}
    back = {(replica, value) for replica in in_sync for topic in final for value in stored(replica, topic)
            if value in ended and any(deleted == topic and at > ended[value]["time"] for at, deleted in deletes)}
    return Result("C11 deleted topics", {"acked": len(acked), "deletes": len(deletes), "lost": len(missing),
                                         "came back": len(back)},
                  ("lost", "came back"), _examples(missing | {value for _, value in back}))


@dataclass(frozen=True)
class _Receive:
    """A FIFO receive the consumer got an answer to, with its client-side times (monotonic s)."""

    invoked: float
    completed: float
    process: str
    invisible_s: float
    messages: list[dict]  # as carried: {"value", "id", "queue", "offset", "attempt"}


def _first_invoked(records: list[dict], f: str) -> dict[str, float]:
    """Each value -> when the first operation `f` on it was invoked."""
    first: dict[str, float] = {}
    for r in records:
        if r["f"] == f and r["type"] == "invoke":
            first[r["value"]] = min(r["time"], first.get(r["value"], math.inf))
    return first


def _group_order(receives: list[_Receive], never_dead: set[str], acks: dict[str, float]) -> list[tuple[str, str]]:
    """(earlier, later) where a receive carried a later message of a message group while an
    earlier one, never dead-lettered, had no ack invoked before the receive completed (an ack
    still unanswered may have landed first) and was not carried before it in that receive.
    That earlier message was stored before the later one was sent (W6 sends a group's next value
    once the last is acknowledged or refused, and a copy stored twice is judged by its first,
    acked or dead-lettered before anything behind it), and nothing took it off the queue: it was
    leased, or waiting for its next delivery. Which of the two receives the broker served first
    does not matter."""
    index: dict[str, tuple[list[int], list[float], list[float]]] = {}
    by_group: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for value in never_dead:
        group, sequence = _producer_sequence(value)
        by_group[group].append((sequence, acks.get(value, math.inf)))
    for group, entries in by_group.items():
        entries.sort()
        highest, latest = [], -math.inf  # the latest first ack among the group's values up to each
        for _, acked_at in entries:
            latest = max(latest, acked_at)
            highest.append(latest)
        index[group] = ([sequence for sequence, _ in entries], [acked_at for _, acked_at in entries], highest)
    found = []
    for receive in receives:
        carried: dict[str, set[int]] = defaultdict(set)
        for message in receive.messages:
            group, sequence = _producer_sequence(message["value"])
            sequences, acked_at, highest = index.get(group, ([], [], []))
            before = bisect_left(sequences, sequence)
            if before and highest[before - 1] >= receive.completed:
                pending = next((earlier for earlier, at in zip(sequences[:before], acked_at[:before])
                                if at >= receive.completed and earlier not in carried[group]), None)
                if pending is not None:
                    found.append((f"{group}-{pending}", message["value"]))
            carried[group].add(sequence)
    return found


def _leased_order(records: list[dict], receives: list[_Receive], dead: set[str],
                  acks: dict[str, float]) -> list[tuple[str, str]]:
    """(earlier, later) where a receive carried a later message of a message group while a lease
    on an earlier one that was dead-lettered in the end was certainly valid. Such a message may
    have gone to the DLQ at any time after its last lease, so only its leases are judged: one
    handed out by a receive invoked at t0 asking d seconds lasts past t0 + d (the broker granted
    it after t0, on the same machine's monotonic clock), unless it was cut short first: a failure
    the consumer reported (ChangeInvisibleDuration brings the message back after the group's
    back-off), the consumer's crash (a broker may drop a leaving client's leases) or an ack. A
    later receive is judged only when it began after that lease was handed out and completed
    before the lease could end."""
    crashed = {r["process"]: r["time"] for r in records if r["f"] == "fifo-crash" and r["type"] == "invoke"}
    failed: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r["f"] == "fifo-fail" and r["type"] == "invoke":
            failed[r["value"]].append(r["time"])
    starts = [receive.invoked for receive in receives]
    found = []
    for receive in receives:
        for message in receive.messages:
            if message["value"] not in dead:
                continue
            group, sequence = _producer_sequence(message["value"])
            ends = min([receive.invoked + receive.invisible_s, acks.get(message["value"], math.inf),
                        crashed.get(receive.process, math.inf),
                        *(at for at in failed[message["value"]] if at >= receive.invoked)])
            for later in receives[bisect_left(starts, receive.completed):]:
                if later.invoked >= ends:
                    break
                if later.completed >= ends:
                    continue
                for carried in later.messages:
                    other_group, other = _producer_sequence(carried["value"])
                    if other_group == group and other >= sequence:
                        if other > sequence:
                            found.append((message["value"], carried["value"]))
                        break
    return found


def _dead_lettered_early(receives: list[_Receive], unanswered: list[tuple[float, float]], dead: set[str],
                         max_attempts: int) -> list[str]:
    """Dead letters with fewer than `max_attempts` deliveries the history cannot rule out. The
    broker counts deliveries the history never saw: a receive whose answer was lost (a timeout,
    a connection cut in a failover, an error answered after the lease was granted because its
    record could not be copied) leased messages all the same, and a failover is where these
    happen. Counting only the deliveries seen would then under-count and fail a run whose DLQ
    was right, so the count is the highest delivery attempt seen (it counts every delivery
    before it, seen or not) plus one for each receive of unknown outcome (info, or never ended)
    that may have come after it; one that failed reached no broker. That errs toward passing: a
    premature dead letter during a failover can go unnoticed."""
    deliveries: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for receive in receives:
        for message in receive.messages:
            deliveries[message["value"]].append((receive.invoked, message["attempt"] or 1))
    early = []
    for value in dead:
        seen = deliveries.get(value, [])
        last = max((invoked for invoked, _ in seen), default=-math.inf)
        possible = max(len(seen), max((attempt for _, attempt in seen), default=0))
        possible += sum(ended > last for _, ended in unanswered)
        if possible < max_attempts:
            early.append(value)
    return early


def fifo(records: list[dict], max_attempts: int) -> Result:
    """C12 (W6): a FIFO group's consumption, judged from the consumers' side.

    - "out of order": a receive carried a later message of a message group while an earlier one,
      handed out before or still waiting, was neither acknowledged nor dead-lettered
      (_group_order for messages never dead-lettered, _leased_order for those that were);
    - "lost": an acknowledged send neither received by the group nor in its DLQ;
    - "never settled": a message the group received that no ack took (ok or unknown) and that is
      not in the DLQ once the run drained;
    - "dead-lettered early": a dead letter with fewer deliveries than `max_attempts`
      (retryMaxTimes + 1), counting what the history cannot rule out (_dead_lettered_early).

    The DLQ is what the DLQ reader read (every value it ever received); "never settled" fails a
    run whose drain did not end, so the order rules can trust it as whole."""
    invoked = {r["op"]: r for r in records if r["type"] == "invoke"}
    answered = _completions(records, "fifo-receive", "ok")
    receives = sorted((_Receive(invoked[r["op"]]["time"], r["time"], r["process"], invoked[r["op"]]["invisible_s"],
                                r["messages"]) for r in answered), key=lambda receive: receive.invoked)
    ended = {r["op"]: r["time"] for r in records if r["f"] == "fifo-receive" and r["type"] != "invoke"}
    answered_ops = {r["op"] for r in answered}
    failed = {r["op"] for r in _completions(records, "fifo-receive", "fail")}
    unanswered = [(r["time"], ended.get(r["op"], math.inf)) for r in records
                  if r["f"] == "fifo-receive" and r["type"] == "invoke" and r["op"] not in answered_ops | failed]
    acks = _first_invoked(records, "fifo-ack")
    consumed = {r["value"] for r in records if r["f"] == "fifo-ack" and r["type"] in ("ok", "info")}
    dead = {message["value"] for r in _completions(records, "dlq-receive", "ok") for message in r["messages"]}
    delivered = [message for receive in receives for message in receive.messages]
    received = {message["value"] for message in delivered}
    sent = {r["value"] for r in _completions(records, "fifo-send", "ok")}
    disorder = _group_order(receives, received - dead, acks) + _leased_order(records, receives, dead, acks)
    lost = sent - received - dead
    unsettled = received - consumed - dead
    early = _dead_lettered_early(receives, unanswered, dead, max_attempts)
    figures = {"acked sends": len(sent), "receives": len(receives), "deliveries": len(delivered),
               "redeliveries": sum((message["attempt"] or 1) > 1 for message in delivered),
               "acks": len(_completions(records, "fifo-ack", "ok")),
               "failures injected": sum(r["f"] == "fifo-fail" and r["type"] == "invoke" for r in records),
               "crashes": sum(r["f"] == "fifo-crash" and r["type"] == "invoke" for r in records),
               "dead letters": len(dead), "out of order": len(disorder), "lost": len(lost),
               "never settled": len(unsettled), "dead-lettered early": len(early)}
    return Result("C12 FIFO", figures, ("out of order", "lost", "never settled", "dead-lettered early"),
                  _examples([*disorder, *lost, *unsettled, *early]))


TIMER_PRECISION_MS = 1000  # timerPrecisionMs: a timer may become visible this long before its delivery time
CLOCK_FAULT = "F12"
# A timer a broker delivered early while its clock was jumped or drifting forward may reach a
# consumer a little after the heal (its next receive); this long after it, none is excused.
CLOCK_SETTLE_S = 10.0


def commit_intended(value: str) -> bool:
    """W7's rule: a transaction "x<i>-<seq>-<fate>" is to be committed when its fate ends so, by
    the producer or by the checker that answers the broker's check (which never says otherwise)."""
    return value.endswith("commit")


def _clock_fault_windows(records: list[dict]) -> list[tuple[float, float]]:
    """(from, to) monotonic times while some broker's clock was wrong (F12, alone or in F13),
    and CLOCK_SETTLE_S after."""
    windows, began = [], None
    for r in records:
        if r["process"] != "nemesis":
            continue
        if r["f"] == "fault" and r["value"]["fault"] == CLOCK_FAULT and began is None:
            began = r["time"]
        elif r["f"] == "heal" and began is not None:
            windows.append((began, r["time"] + CLOCK_SETTLE_S))
            began = None
    return windows + ([(began, math.inf)] if began is not None else [])


def _percentile(values: list[int], fraction: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _deliveries(records: list[dict], f: str) -> tuple[dict[str, set[tuple[int, int]]], int]:
    """Each value a receive `f` carried -> the (queue, offset) places it came from, and how many
    deliveries there were in all."""
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    count = 0
    for r in _completions(records, f, "ok"):
        for message in r["messages"]:
            places[message["value"]].add((message["queue"], message["offset"]))
            count += 1
    return places, count


def timers(records: list[dict]) -> Result:
    """C13 (W7): delay messages, judged on the consumers' wall clock (the client's own, which no
    fault moves) against the delivery time the producer gave.

    - "lost": an acknowledged timer never received;
    - "delivered early": a receive that returned a timer more than TIMER_PRECISION_MS before its
      delivery time (it was visible before the receive returned, so this errs toward passing),
      unless it returned while a broker's clock was wrong (F12: a broker can only go by its own
      clock), which is counted apart;
    - "never sent": a timer received that no send attempted.

    Figures: lateness, from the later of the delivery time and the send's acknowledgement (a
    timer in the past is due at once) to the first receive that returned it, in ms; copies of
    a timer past its first (stored twice, allowed around a failover) and redeliveries of one copy
    (an ack that did not land)."""
    deliver_ms = {r["value"]: r["deliver_ms"] for r in records if r["f"] == "timer-send" and r["type"] == "invoke"}
    acked = {r["value"]: r["wall_ms"] for r in _completions(records, "timer-send", "ok")}
    windows = _clock_fault_windows(records)
    first: dict[str, int] = {}  # value -> wall ms when a receive first returned it
    early, excused = [], 0
    for r in _completions(records, "timer-receive", "ok"):
        for message in r["messages"]:
            value = message["value"]
            first.setdefault(value, r["wall_ms"])
            if value in deliver_ms and r["wall_ms"] < deliver_ms[value] - TIMER_PRECISION_MS:
                if any(began <= r["time"] <= ended for began, ended in windows):
                    excused += 1
                else:
                    early.append((value, deliver_ms[value] - r["wall_ms"]))
    places, deliveries = _deliveries(records, "timer-receive")
    lost = set(acked) - set(first)
    never_sent = set(first) - set(deliver_ms)
    late = [first[value] - max(deliver_ms[value], acked_ms) for value, acked_ms in acked.items() if value in first]
    copies = sum(len(where) for where in places.values())
    figures = {"acked": len(acked), "received": len(first), "lost": len(lost), "delivered early": len(early),
               "early under a clock fault": excused, "never sent": len(never_sent),
               "duplicate copies": copies - len(places), "redeliveries": deliveries - copies,
               "late p50 ms": _percentile(late, 0.5), "late p99 ms": _percentile(late, 0.99),
               "late max ms": max(late, default=None)}
    return Result("C13 timers", figures, ("lost", "delivered early", "never sent"),
                  _examples([*lost, *early, *never_sent]))


def _outcomes(records: list[dict], *fs: str) -> list[tuple[dict, str]]:
    """Each operation of the kinds `fs`, in the order they began: its invocation and how it ended
    ("info" when it never did)."""
    ended = {r["op"]: r["type"] for r in records if r["f"] in fs and r["type"] != "invoke"}
    return [(r, ended.get(r["op"], "info")) for r in records if r["f"] in fs and r["type"] == "invoke"]


def transactions(records: list[dict]) -> Result:
    """C14 (W7): transactional messages, each "x<i>-<seq>-<fate>" (commit_intended), decided by
    its producer ("tx-end") or by the checker answering the broker's check ("tx-check").

    - "rolled back but received": a transaction to be rolled back was received at all: nobody
      ever commits one, so its send's or decisions' outcomes do not matter;
    - "committed but never received": an acknowledged half message whose commit was
      acknowledged (by the producer's EndTransaction or the checker's) never received;
    - "never resolved": an acknowledged half message that no decision resolved: one to be
      committed never received, one to be rolled back with no rollback that may have landed
      (acknowledged, or of unknown outcome). The broker checks an undecided one until it is
      decided (the runs set transactionCheckMax past what they can use up), and the checker
      decides by the same rule, so each ends decided.

    A send or decision of unknown outcome may go either way otherwise. Figures: half messages
    acknowledged, decisions, transactions left to the check, checks and their UNKNOWN answers,
    those resolved by a check (a COMMIT or ROLLBACK answer acknowledged), copies received twice
    and redeliveries."""
    half = {r["value"] for r in _completions(records, "tx-send", "ok")}
    decisions = _outcomes(records, "tx-end")
    checks = _outcomes(records, "tx-check")
    places, deliveries = _deliveries(records, "tx-receive")
    received = set(places)
    decided = [(r["value"], r["resolution"], outcome) for r, outcome in [*decisions, *checks]]
    committed = {value for value, resolution, outcome in decided if resolution == "commit" and outcome == "ok"}
    rolled_back = {value for value, resolution, outcome in decided if resolution == "rollback" and outcome != "fail"}
    resolved_by_check = {r["value"] for r, outcome in checks if outcome == "ok" and r["resolution"] != "unknown"}
    bad = {value for value in received if not commit_intended(value)}
    lost = (half & committed) - received
    unresolved = {value for value in half - received - lost if commit_intended(value) or value not in rolled_back}
    copies = sum(len(where) for where in places.values())
    figures = {"half messages acked": len(half),
               "committed by the producer": sum(o == "ok" and r["resolution"] == "commit" for r, o in decisions),
               "rolled back by the producer": sum(o == "ok" and r["resolution"] == "rollback" for r, o in decisions),
               "left to the check": len(half - {r["value"] for r, _ in decisions}),
               "checks": len(checks), "answered unknown": sum(r["resolution"] == "unknown" for r, _ in checks),
               "resolved by check": len(half & resolved_by_check), "received": len(received),
               "duplicate copies": copies - len(places), "redeliveries": deliveries - copies,
               "rolled back but received": len(bad), "committed but never received": len(lost),
               "never resolved": len(unresolved)}
    return Result("C14 transactions", figures,
                  ("rolled back but received", "committed but never received", "never resolved"),
                  _examples([*bad, *lost, *unresolved]))


# A user as a replica holds it: password, type, status, rules (resource, grant).
HeldUser = tuple[str, str, str, frozenset[tuple[str, str]]]
UserState = HeldUser | None  # None: no such user
AccessRead = dict[str, dict[str, HeldUser]]  # replica -> each user it holds
ACCESS_CHANGES = ("create-user", "update-user", "create-acl", "update-acl", "delete-acl", "delete-user")
USER_FIELDS = ("password", "user_type", "user_status")  # what create-user sets and update-user may change
CREATED = {"user_type": "Normal", "user_status": "enable"}  # what W8's create-user sets besides the password


def access_grant(actions: Iterable[str], decision: str) -> str:
    """An ACL entry's actions and decision as W8 records them and C15 compares them: "Pub Allow"."""
    return f"{','.join(sorted(actions))} {decision}"


def _access_applied(state: UserState, change: dict) -> list[UserState]:
    """The user after `change`, or nothing when the broker would have refused it on `state`."""
    f = change["f"]
    if f == "create-user":
        return [(*({**CREATED, **change}[name] for name in USER_FIELDS), frozenset())] if state is None else []
    if state is None:
        return []
    *user, rules = state
    if f == "update-user":  # what the change names, the rest as it was
        return [(*(change.get(name, old) for name, old in zip(USER_FIELDS, user)), rules)]
    if f in ("create-acl", "update-acl"):  # an entry replaces the user's entry for its resource
        return [(*user, frozenset(rule for rule in rules if rule[0] != change["resource"])
                 | {(change["resource"], change["grant"])})]
    if f == "delete-acl":  # the entries for its resource; refused when the user has no rules at all
        return [(*user, frozenset(rule for rule in rules if rule[0] != change["resource"]))] if rules else []
    return [None]  # delete-user takes its rules with it


World = tuple[UserState, frozenset[int]]  # a user's state and the changes of unknown outcome not applied yet


def _unknown_applied(worlds: set[World], changes: list[tuple[dict, str]]) -> set[World]:
    """`worlds` and every world they lead to by applying their pending changes in any order."""
    seen, todo = set(worlds), list(worlds)
    while todo:
        state, pending = todo.pop()
        for index in pending:
            for after in _access_applied(state, changes[index][0]):
                world = (after, pending - {index})
                if world not in seen:
                    seen.add(world)
                    todo.append(world)
    return seen


def _possible_users(changes: list[tuple[dict, str]]) -> set[UserState]:
    """The states one user's changes can leave it in: the acknowledged ones applied in the order
    they were made (W8 makes one at a time), each of unknown outcome at any time after it began or
    never, the refused ones never."""
    worlds: set[World] = {(None, frozenset())}
    for index, (change, outcome) in enumerate(changes):
        if outcome == "info":
            worlds = {(state, pending | {index}) for state, pending in worlds}
        elif outcome == "ok":
            worlds = {(after, pending) for state, pending in _unknown_applied(worlds, changes)
                      for after in _access_applied(state, change)}
    return {state for state, _ in _unknown_applied(worlds, changes)}


def _access_problem(held: UserState, possible: set[UserState]) -> str:
    present = [state for state in possible if state is not None]
    if held is None:
        return "lost"
    if not present:
        return "came back"
    if held[0] not in {state[0] for state in present}:
        return "wrong password"
    if held[1:3] not in {state[1:3] for state in present}:
        return "wrong type or status"
    return "wrong rules"


def access_changes(records: list[dict], final: AccessRead) -> Result:
    """C15 (W8): `final` holds the users and rules of the final master and of each in-sync replica
    that could be read after the heal. Each user there, and each user a change named, must be in a
    state its changes can leave it in (_possible_users): an acknowledged create or update whose
    user no acknowledged delete removed since is there ("lost" if not) with the last acknowledged
    password, type and status or those of an update of unknown outcome ("wrong password", "wrong
    type or status"), and with its acknowledged rules ("wrong rules": an entry created, updated or
    deleted for its resource); a user an acknowledged delete removed is not, unless a create that
    may have landed came after it, and no user is there that no create may have made ("came
    back")."""
    by_user: dict[str, list[tuple[dict, str]]] = defaultdict(list)
    outcomes = _outcomes(records, *ACCESS_CHANGES)
    for change, outcome in outcomes:
        by_user[change["value"]].append((change, outcome))
    problems: dict[str, list[tuple[str, str]]] = {"lost": [], "came back": [], "wrong password": [],
                                                  "wrong type or status": [], "wrong rules": []}
    for user in sorted(set(by_user) | {user for read in final.values() for user in read}):
        possible = _possible_users(by_user[user])
        for replica in sorted(final):
            held = final[replica].get(user)
            if held not in possible:
                problems[_access_problem(held, possible)].append((replica, user))
    acked = [change["f"] for change, outcome in outcomes if outcome == "ok"]
    figures = {"replicas read": len(final), "users": len(by_user),
               **{f"acked {f}s": acked.count(f) for f in ACCESS_CHANGES},
               "unknown": sum(outcome == "info" for _, outcome in outcomes),
               **{problem: len(found) for problem, found in problems.items()}}
    return Result("C15 users and rules", figures, tuple(problems),
                  _examples(found for found_all in problems.values() for found in found_all))


def split_brain(records: list[dict]) -> Result:
    """C7: within one master epoch, one queue offset was acknowledged for one value only."""
    acked: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for r in _completions(records, "send", "ok"):
        acked[r["queue"], r["epoch"], r["offset"]].add(r["value"])
    clashes = {key: values for key, values in acked.items() if len(values) > 1}
    epochs = {r["epoch"] for r in _completions(records, "send", "ok")}
    return Result("C7 split brain", {"epochs": len(epochs), "two values acked at one place": len(clashes)},
                  ("two values acked at one place",), _examples(clashes))


def convergence(final: FinalRead, in_sync: set[str]) -> Result:
    """C8: the in-sync replicas hold the same messages at the same offsets, below the shortest one."""
    replicas = sorted(in_sync)
    queues = {queue for replica in replicas for queue in final[replica]}
    diverged = []
    for queue in sorted(queues):
        reads = [final[replica].get(queue, []) for replica in replicas]
        common = min(len(read) for read in reads)
        if any(read[:common] != reads[0][:common] for read in reads):
            diverged.append(queue)
    return Result("C8 convergence", {"queues": len(queues), "diverged": len(diverged)}, ("diverged",),
                  _examples(diverged))


RSS_LIMIT_MB = 256  # a quorumq process's peak resident set in a chaos run; they idle near 55 MB


@dataclass(frozen=True)
class Hygiene:
    """What the run saw of its processes: the ones found dead that no fault had stopped, each
    process's peak resident set (VmHWM, MB), and the log lines of unhandled errors."""

    exits: tuple[str, ...] = ()
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    unhandled: tuple[str, ...] = ()


def hygiene(facts: Hygiene) -> Result:
    """C10: no process exited unless a fault stopped it, none logged an unhandled error (a
    traceback, an asyncio task exception nobody retrieved), none grew past RSS_LIMIT_MB."""
    over = {name: mb for name, mb in facts.peak_rss_mb.items() if mb > RSS_LIMIT_MB}
    return Result("C10 hygiene", {"unexpected exits": len(facts.exits), "unhandled errors": len(facts.unhandled),
                                  "over the RSS limit": len(over),
                                  "peak RSS MB": round(max(facts.peak_rss_mb.values(), default=0))},
                  ("unexpected exits", "unhandled errors", "over the RSS limit"),
                  _examples([*facts.exits, *facts.unhandled, *over]))


def check_all(records: list[dict], final: FinalRead, final_offsets: FinalOffsets, final_master: str,
              in_sync: set[str], facts: Hygiene) -> list[Result]:
    return [lost(records, final, final_master, in_sync), unexpected(records, final),
            inconsistent_offsets(records, final), duplicates(records, final, final_master),
            order(records, final, final_master), commits(records, final_offsets, in_sync), split_brain(records),
            convergence(final, in_sync), hygiene(facts)]


def summary(records: list[dict]) -> dict[str, int]:
    """Sends invoked and how they ended."""
    sends = [r for r in records if r["f"] == "send"]
    return {"invoked": sum(r["type"] == "invoke" for r in sends), "ok": sum(r["type"] == "ok" for r in sends),
            "fail": sum(r["type"] == "fail" for r in sends), "info": sum(r["type"] == "info" for r in sends)}


def availability(records: list[dict], healed_at: float) -> dict[str, Any]:
    """C9's figures (the spec sets no bar for them here): the faults, the acknowledged sends, the
    longest time from a fault (or the heal) to the next acknowledged send, the longest time with
    no acknowledged send at all, and how long after the heal every consumer group had committed
    past every send acknowledged before it (None: the groups never got there, or the run had
    no consumers)."""
    acked = sorted(r["time"] for r in _completions(records, "send", "ok"))
    faults = [r["time"] for r in records if r["process"] == "nemesis" and r["f"] == "fault"]

    def to_next_ack(moment: float) -> float | None:
        return next((round(t - moment, 3) for t in acked if t >= moment), None)

    waits = [wait for wait in map(to_next_ack, faults) if wait is not None]
    gaps = [later - earlier for earlier, later in zip(acked, acked[1:])]
    return {"faults": len(faults), "acked": len(acked), "fault_to_ack_max_s": max(waits, default=None),
            "heal_to_ack_s": to_next_ack(healed_at), "longest_without_ack_s": round(max(gaps, default=0), 3),
            "heal_to_drain_s": _heal_to_drain(records, healed_at)}


def _heal_to_drain(records: list[dict], healed_at: float) -> float | None:
    ends: dict[int, int] = defaultdict(int)  # queue id -> one past its last send acknowledged before the heal
    for r in _completions(records, "send", "ok"):
        if r["time"] <= healed_at:
            queue = int(r["queue"].rpartition(":")[2])
            ends[queue] = max(ends[queue], r["offset"] + 1)
    commits = _completions(records, "commit", "ok")
    groups = {r["value"]["group"] for r in commits}
    if not groups:
        return None
    drained = []
    for group in groups:
        for queue, end in ends.items():
            reached = [r["time"] for r in commits if r["value"]["group"] == group and r["value"]["queue"] == queue
                       and r["value"]["offset"] >= end]
            if not reached:
                return None
            drained.append(min(reached))
    return round(max(max(drained, default=healed_at) - healed_at, 0.0), 3)  # nothing acknowledged before: drained


def verdict_table(results: list[Result], rows: dict[str, Any]) -> str:
    """A short table: the run's settings and figures, then each checker's verdict and counts."""
    lines = [" ".join(f"{key}={value}" for key, value in rows.items())]
    width = max(len(result.name) for result in results)
    for result in results:
        counts = ", ".join(f"{name} {count}" for name, count in result.counts.items())
        example = f"  e.g. {result.examples[:3]}" if not result.ok else ""
        lines.append(f"{result.name:<{width}}  {'ok  ' if result.ok else 'FAIL'}  {counts}{example}")
    return "\n".join(lines)
