"""C13 and C14 (W7) on small hand-made histories: each passes a clean run and catches its
failures, and lets through what the brief allows (sends and decisions of unknown outcome, copies
received twice, early timers while a broker's clock was wrong)."""

from checkers import CLOCK_SETTLE_S, TIMER_PRECISION_MS, timers, transactions

T0_MS = 1_700_000_000_000  # the wall clock at monotonic time 0 in these histories


class W7History:
    """W7 records made by hand: each call adds one operation, its invocation at `at` (monotonic
    s) and its completion (`outcome`) 0.01 s later; wall times follow the monotonic ones."""

    def __init__(self):
        self.records = []

    def _op(self, process, f, value, at, outcome="ok", invoked=None, **completed):
        op = len(self.records)
        self.records.append({"time": at, "process": process, "type": "invoke", "f": f, "op": op, "value": value,
                             **(invoked or {})})
        if outcome is not None:
            self.records.append({"time": at + 0.01, "process": process, "type": outcome, "f": f, "op": op,
                                 "value": value, **completed})
        return self

    def timer(self, value, at, due_s, outcome="ok"):
        """A timer sent at `at`, due at monotonic time `due_s`."""
        extra = {"wall_ms": _wall(at + 0.01)} if outcome == "ok" else {}
        return self._op("timer-p0", "timer-send", value, at, outcome, {"deliver_ms": _wall(due_s)}, **extra)

    def receive(self, f, at, *values, places=None):
        """A receive returning at `at` + 0.01; a value's place defaults to its own (queue 0, index)."""
        messages = [{"value": value, "id": value.upper(), "queue": 0,
                     "offset": (places or {}).get(value, index), "attempt": 1} for index, value in enumerate(values)]
        return self._op("c0", f, {"group": "G"}, at, wall_ms=_wall(at + 0.01), messages=messages)

    def half(self, value, at, outcome="ok"):
        return self._op("tx-p0", "tx-send", value, at, outcome)

    def end(self, value, at, resolution, outcome="ok"):
        return self._op("tx-p0", "tx-end", value, at, outcome, {"resolution": resolution})

    def check(self, value, at, resolution, outcome="ok"):
        return self._op("tx-p1", "tx-check", value, at, outcome, {"resolution": resolution})

    def fault(self, kind, at):
        self.records.append({"time": at, "process": "nemesis", "type": "invoke", "f": "fault",
                             "op": len(self.records), "value": {"fault": kind, "target": "+3600000 ms b0"}})
        return self

    def heal(self, at):
        self.records.append({"time": at, "process": "nemesis", "type": "invoke", "f": "heal",
                             "op": len(self.records), "value": "F13"})
        return self


def _wall(monotonic_s):
    return T0_MS + round(monotonic_s * 1000)


def test_c13_passes_timers_delivered_at_or_after_their_time_and_reports_their_lateness():
    h = W7History().timer("d0-0", 1, due_s=5).timer("d0-1", 1.1, due_s=10).timer("d0-2", 1.2, due_s=-8)
    h.receive("timer-receive", 1.5, "d0-2").receive("timer-receive", 5.3, "d0-0")
    h.receive("timer-receive", 10.09, "d0-1")
    result = timers(h.records)
    assert result.ok, result
    # Lateness from the later of the delivery time and the ack: d0-2 was due in the past, so from its ack at 1.21.
    assert (result.counts["late p50 ms"], result.counts["late max ms"]) == (300, 310)
    assert result.counts["acked"] == result.counts["received"] == 3


def test_c13_fails_an_acknowledged_timer_never_received_but_not_one_of_unknown_outcome():
    h = W7History().timer("d0-0", 1, due_s=5).timer("d0-1", 1.1, due_s=5, outcome="info")
    result = timers(h.records)
    assert not result.ok and result.counts["lost"] == 1 and result.examples == ["d0-0"]


def test_c13_fails_a_timer_returned_more_than_the_precision_before_its_time():
    last_allowed_s = 5 - TIMER_PRECISION_MS / 1000 - 0.01  # the receive returns 0.01 s after it began
    within = W7History().timer("d0-0", 1, due_s=5).receive("timer-receive", last_allowed_s, "d0-0")
    assert timers(within.records).ok
    early = W7History().timer("d0-0", 1, due_s=5).receive("timer-receive", last_allowed_s - 0.001, "d0-0")
    result = timers(early.records)
    assert result.counts["delivered early"] == 1 and result.examples == [("d0-0", TIMER_PRECISION_MS + 1)]
    unknown = W7History().timer("d0-0", 1, due_s=5, outcome="info").receive("timer-receive", 2, "d0-0")
    assert timers(unknown.records).counts["delivered early"] == 1  # a stored timer keeps its time, acked or not


def test_c13_excuses_an_early_timer_while_a_broker_s_clock_is_wrong_and_shortly_after():
    def early_at(receive_at):
        h = W7History().timer("d0-0", 1, due_s=100).fault("F12", 2).heal(20)
        return timers(h.receive("timer-receive", receive_at, "d0-0").records)

    for inside in (2.5, 20 + CLOCK_SETTLE_S - 1):
        result = early_at(inside)
        assert result.ok and result.counts["early under a clock fault"] == 1, result
    assert early_at(20 + CLOCK_SETTLE_S + 1).counts["delivered early"] == 1
    other_fault = W7History().timer("d0-0", 1, due_s=100).fault("F1", 2).receive("timer-receive", 3, "d0-0")
    assert timers(other_fault.records).counts["delivered early"] == 1


def test_c13_fails_a_timer_nobody_sent_and_counts_copies_and_redeliveries():
    h = W7History().timer("d0-0", 1, due_s=2).receive("timer-receive", 2.1, "d0-0", "ghost")
    h.receive("timer-receive", 13, "d0-0", places={"d0-0": 0})  # the same copy again: its ack was lost
    h.receive("timer-receive", 14, "d0-0", places={"d0-0": 7})  # a second copy
    result = timers(h.records)
    assert result.counts["never sent"] == 1 and result.examples == ["ghost"]
    assert (result.counts["duplicate copies"], result.counts["redeliveries"]) == (1, 1)


def test_c14_passes_transactions_committed_rolled_back_and_resolved_by_check():
    h = W7History().half("x0-0-commit", 1).end("x0-0-commit", 1.1, "commit")
    h.half("x0-1-rollback", 1.2).end("x0-1-rollback", 1.3, "rollback")
    h.half("x0-2-check-commit", 1.4).half("x0-3-unknown-rollback", 1.5)
    h.check("x0-2-check-commit", 4, "commit").check("x0-3-unknown-rollback", 4.1, "unknown")
    h.check("x0-3-unknown-rollback", 6.1, "rollback")
    h.receive("tx-receive", 1.2, "x0-0-commit").receive("tx-receive", 4.2, "x0-2-check-commit")
    result = transactions(h.records)
    assert result.ok, result
    assert result.counts == {"half messages acked": 4, "committed by the producer": 1, "rolled back by the producer": 1,
                             "left to the check": 2, "checks": 3, "answered unknown": 1, "resolved by check": 2,
                             "received": 2, "duplicate copies": 0, "redeliveries": 0, "rolled back but received": 0,
                             "committed but never received": 0, "never resolved": 0}


def test_c14_fails_a_transaction_to_be_rolled_back_that_is_received_whatever_its_outcomes():
    h = W7History().half("x0-0-rollback", 1, outcome="info").receive("tx-receive", 2, "x0-0-rollback")
    result = transactions(h.records)
    assert not result.ok and result.counts["rolled back but received"] == 1 and result.examples == ["x0-0-rollback"]


def test_c14_fails_an_acknowledged_commit_never_received():
    by_producer = W7History().half("x0-0-commit", 1).end("x0-0-commit", 1.1, "commit")
    by_check = W7History().half("x0-0-check-commit", 1).check("x0-0-check-commit", 4, "commit")
    for h in (by_producer, by_check):
        result = transactions(h.records)
        assert result.counts["committed but never received"] == 1 and result.counts["never resolved"] == 0


def test_c14_fails_an_acknowledged_half_message_no_decision_resolved():
    """The broker checks an undecided half message until it is decided, and the checker decides
    by the rule: one to be committed ends received, one to be rolled back with a rollback that
    may have landed."""
    commit_unknown = W7History().half("x0-0-commit", 1).end("x0-0-commit", 1.1, "commit", outcome="info")
    never_checked = W7History().half("x0-0-check-rollback", 1)
    refused = W7History().half("x0-0-rollback", 1).end("x0-0-rollback", 1.1, "rollback", outcome="fail")
    for h in (commit_unknown, never_checked, refused):
        result = transactions(h.records)
        assert result.counts["never resolved"] == 1 and result.counts["committed but never received"] == 0, result
    maybe_landed = W7History().half("x0-0-check-rollback", 1).check("x0-0-check-rollback", 4, "rollback", "info")
    assert transactions(maybe_landed.records).ok
    unanswered = W7History().half("x0-0-rollback", 1).end("x0-0-rollback", 1.1, "rollback", outcome=None)
    assert transactions(unanswered.records).ok


def test_c14_lets_a_half_message_of_unknown_outcome_go_either_way():
    missing = W7History().half("x0-0-commit", 1, outcome="info")
    assert transactions(missing.records).ok
    there = W7History().half("x0-0-commit", 1, outcome="info").receive("tx-receive", 5, "x0-0-commit")
    assert transactions(there.records).ok
