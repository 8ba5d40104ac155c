"""The checkers on small hand-made histories: each passes a clean run and catches its failure, and
lets through what the spec allows (recovered values, retried duplicates)."""

import threading

from checkers import (
    RSS_LIMIT_MB,
    Hygiene,
    availability,
    check_all,
    churn,
    commits,
    convergence,
    duplicates,
    fifo,
    hygiene,
    inconsistent_offsets,
    lost,
    order,
    pipeline,
    split_brain,
    translations,
    unexpected,
    verdict_table,
)
from history import History, read_history

Q0, Q1 = "broker-a:0", "broker-a:1"


def history(*sends):
    """Records for sends given as (producer, value, outcome, queue, offset, epoch); outcome is ok,
    info or fail, and queue/offset/epoch matter only for ok."""
    records, op = [], 0
    for producer, value, outcome, queue, offset, epoch in sends:
        records.append({"time": op, "process": producer, "type": "invoke", "f": "send", "op": op, "value": value})
        done = {"time": op + 0.5, "process": producer, "type": outcome, "f": "send", "op": op, "value": value}
        if outcome == "ok":
            done.update(queue=queue, offset=offset, epoch=epoch, broker="broker-a")
        records.append(done)
        op += 1
    return records


def ok(producer, value, queue, offset, epoch=1):
    return (producer, value, "ok", queue, offset, epoch)


def unknown(producer, value):
    return (producer, value, "info", None, None, None)


CLEAN = history(ok("p0", "p0-0", Q0, 0), ok("p1", "p1-0", Q1, 0), ok("p0", "p0-1", Q0, 1))
CLEAN_READ = {Q0: [(0, "p0-0"), (1, "p0-1")], Q1: [(0, "p1-0")]}


def test_a_clean_run_passes_every_checker():
    final = {"m": CLEAN_READ, "s": CLEAN_READ}
    results = check_all(CLEAN, final, {"m": {}, "s": {}}, "m", {"m", "s"}, Hygiene(peak_rss_mb={"broker-a-0": 55.0}))
    assert all(result.ok for result in results), verdict_table(results, {})
    assert lost(CLEAN, final, "m", {"m", "s"}).counts["acked"] == 3


def test_an_acknowledged_value_missing_from_the_master_is_lost():
    final = {"m": {Q0: [(0, "p0-0")], Q1: [(0, "p1-0")]}}
    result = lost(CLEAN, final, "m", {"m"})
    assert not result.ok and result.counts["lost"] == 1 and result.examples == ["p0-1"]


def test_a_value_missing_on_an_in_sync_replica_is_lost_there():
    final = {"m": CLEAN_READ, "s": {Q0: [(0, "p0-0")], Q1: [(0, "p1-0")]}}
    assert lost(CLEAN, final, "m", {"m", "s"}).counts["lost on an in-sync replica"] == 1
    assert lost(CLEAN, final, "m", {"m"}).ok  # a replica out of the set may lag


def test_a_value_never_sent_is_unexpected_and_an_unknown_send_read_back_is_recovered():
    records = CLEAN + history(unknown("p2", "p2-0"))
    final = {"m": {**CLEAN_READ, Q1: [(0, "p1-0"), (1, "p2-0"), (2, "ghost-0")]}}
    result = unexpected(records, final)
    assert result.counts == {"unexpected": 1, "recovered": 1} and result.examples == ["ghost-0"]


def test_one_offset_with_two_values_is_inconsistent():
    final = {"m": CLEAN_READ, "s": {Q0: [(0, "p0-0"), (1, "p9-9")], Q1: [(0, "p1-0")]}}
    result = inconsistent_offsets(CLEAN, final)
    assert not result.ok and result.examples == [((Q0, 1), ["p0-1", "p9-9"])]


def test_an_acknowledged_offset_holding_another_value_is_inconsistent():
    final = {"m": {Q0: [(0, "p0-0"), (1, "p5-5")], Q1: [(0, "p1-0")]}}
    assert inconsistent_offsets(CLEAN, final).counts["inconsistent"] == 1


def test_a_duplicate_is_explained_only_by_a_retried_send():
    retried = history(unknown("p0", "p0-0"), ok("p0", "p0-0", Q0, 1))
    final = {"m": {Q0: [(0, "p0-0"), (1, "p0-0")]}}
    assert duplicates(retried, final, "m").counts == {"duplicates": 1, "explained": 1, "unexplained": 0}
    once = history(ok("p0", "p0-0", Q0, 1))
    result = duplicates(once, final, "m")
    assert not result.ok and result.counts["unexplained"] == 1
    resent = history(ok("p0", "p0-0", Q0, 1))  # the client sent it twice: its first request got no answer
    resent[-1]["attempts"] = 2
    assert duplicates(resent, final, "m").counts == {"duplicates": 1, "explained": 1, "unexplained": 0}


def test_every_copy_counts_and_an_idempotent_producer_s_duplicate_is_never_explained():
    """W3: a value resent with its message id must be stored once, whatever the outcomes were."""
    thrice = {"m": {Q0: [(0, "p0-0"), (1, "p0-0"), (2, "p0-0")]}}
    retried = history(unknown("p0", "p0-0"), ok("p0", "p0-0", Q0, 0))
    assert duplicates(retried, thrice, "m").counts == {"duplicates": 2, "explained": 1, "unexplained": 0}
    for record in retried:
        if record["type"] == "invoke":
            record["idempotent"] = True
    result = duplicates(retried, thrice, "m")
    assert not result.ok and result.counts == {"duplicates": 2, "explained": 0, "unexplained": 1}
    assert duplicates(retried, {"m": {Q0: [(0, "p0-0")]}}, "m").ok


def test_acknowledged_offsets_going_back_within_a_queue_break_order():
    records = history(ok("p0", "p0-0", Q0, 5), ok("p0", "p0-1", Q1, 0), ok("p0", "p0-2", Q0, 4))
    result = order(records, {"m": {}}, "m")
    assert result.counts["acks out of order"] == 1 and result.examples == [("p0-0", "p0-2")]


def test_a_queue_holding_a_producer_s_values_out_of_sequence_breaks_order():
    final = {"m": {Q0: [(0, "p0-1"), (1, "p1-0"), (2, "p0-0")]}}
    result = order(CLEAN, final, "m")
    assert result.counts["stored out of order"] == 1
    retried = {"m": {Q0: [(0, "p0-0"), (1, "p0-0"), (2, "p0-1")]}}  # a retry repeats, never goes back
    assert order(CLEAN, retried, "m").counts["stored out of order"] == 0


def test_two_values_acknowledged_at_one_offset_in_one_epoch_is_split_brain():
    records = history(ok("p0", "p0-0", Q0, 3, epoch=2), ok("p1", "p1-0", Q0, 3, epoch=2))
    assert not split_brain(records).ok
    after_failover = history(ok("p0", "p0-0", Q0, 3, epoch=2), ok("p1", "p1-0", Q0, 3, epoch=3))
    result = split_brain(after_failover)
    assert result.ok and result.counts["epochs"] == 2


def test_in_sync_replicas_must_agree_below_the_shortest():
    longer = {Q0: [(0, "p0-0"), (1, "p0-1"), (2, "p0-2")], Q1: [(0, "p1-0")]}
    assert convergence({"m": longer, "s": CLEAN_READ}, {"m", "s"}).ok  # a slave behind is no divergence
    forked = {Q0: [(0, "p0-0"), (1, "p7-7")], Q1: [(0, "p1-0")]}
    result = convergence({"m": longer, "s": forked}, {"m", "s"})
    assert result.counts["diverged"] == 1 and result.examples == [Q0]
    assert convergence({"m": longer, "s": forked}, {"m"}).ok


def test_history_records_completions_with_their_invocation_from_many_threads(tmp_path):
    path = tmp_path / "history.jsonl"
    recorded = History(path)

    def producer(name):
        for sequence in range(200):
            op = recorded.invoke(name, "send", f"{name}-{sequence}")
            recorded.ok(op, queue=Q0, offset=sequence, epoch=1, broker="broker-a")

    threads = [threading.Thread(target=producer, args=(f"p{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorded.close()
    records = read_history(path)
    assert len(records) == 1600 and len({r["op"] for r in records}) == 800
    assert all(r["value"].startswith(r["process"]) for r in records)


def test_a_torn_last_line_is_left_out(tmp_path):
    path = tmp_path / "history.jsonl"
    recorded = History(path)
    recorded.invoke("p0", "send", "p0-0")
    recorded.close()
    with open(path, "a") as out:
        out.write('{"time": 1, "proc')
    assert [r["value"] for r in read_history(path)] == ["p0-0"]


def consumer_ops(*ops):
    """Records for consumer operations given as (f, outcome, offset) on one group's queue 0: a
    commit of `offset`, or a position read that answered `offset`."""
    records = []
    for op, (f, outcome, offset) in enumerate(ops):
        key = {"group": "g", "queue": 0}
        value = {**key, "offset": offset} if f == "commit" else key
        records.append({"time": op, "process": "g/c0", "type": "invoke", "f": f, "op": op, "value": value})
        done = {"time": op + 0.5, "process": "g/c0", "type": outcome, "f": f, "op": op, "value": value}
        if f == "position" and outcome == "ok":
            done["offset"] = offset
        records.append(done)
    return records


def test_commits_that_only_go_forward_pass():
    records = consumer_ops(("position", "ok", None), ("commit", "ok", 5), ("commit", "info", 9),
                           ("position", "ok", 9), ("commit", "ok", 12), ("position", "ok", 12))
    result = commits(records, {"m": {("g", 0): 12}}, {"m"})
    assert result.ok and result.counts["acknowledged commits"] == 2


def test_a_position_below_an_acknowledged_commit_moved_back():
    records = consumer_ops(("commit", "ok", 5), ("commit", "ok", 12), ("position", "ok", 5))
    result = commits(records, {}, set())
    assert not result.ok and result.examples == [(("g", 0), "position", 5, 12)]


def test_a_position_read_begun_before_the_commit_was_acknowledged_may_be_older():
    records = consumer_ops(("commit", "ok", 5))
    read = [{"time": 0.2, "process": "g/c1", "type": "invoke", "f": "position", "op": 9,
             "value": {"group": "g", "queue": 0}},
            {"time": 0.7, "process": "g/c1", "type": "ok", "f": "position", "op": 9,
             "value": {"group": "g", "queue": 0}, "offset": None}]
    assert commits([records[0], read[0], records[1], read[1]], {}, set()).ok


def test_an_acknowledged_commit_below_an_earlier_one_moved_back():
    result = commits(consumer_ops(("commit", "ok", 12), ("commit", "fail", 3), ("commit", "ok", 7)), {}, set())
    assert not result.ok and result.counts["moved back"] == 1


def test_an_in_sync_replica_behind_the_last_acknowledged_commit_moved_back():
    records = consumer_ops(("commit", "ok", 5), ("commit", "ok", 12))
    result = commits(records, {"m": {("g", 0): 12}, "s": {("g", 0): 5}, "lagging": {}}, {"m", "s"})
    assert not result.ok and result.counts["behind on an in-sync replica"] == 1
    assert result.examples == [("s", ("g", 0), 5, 12)]


def test_hygiene_fails_an_exit_an_unhandled_error_or_a_process_past_its_rss_limit():
    assert hygiene(Hygiene(peak_rss_mb={"broker-a-0": RSS_LIMIT_MB})).ok
    assert not hygiene(Hygiene(exits=("broker-a-1",))).ok
    assert not hygiene(Hygiene(unhandled=("broker-a-0: ERROR asyncio: Unhandled exception",))).ok
    result = hygiene(Hygiene(peak_rss_mb={"broker-a-0": 55.0, "broker-a-2": RSS_LIMIT_MB + 1}))
    assert not result.ok and result.examples == ["broker-a-2"]


def test_availability_figures():
    sends = history(ok("p0", "p0-0", Q0, 0), ok("p0", "p0-1", Q0, 1), ok("p1", "p1-0", Q1, 0))  # acked at 0.5, 1.5, 2.5
    fault = {"time": 1.0, "process": "nemesis", "type": "invoke", "f": "fault", "op": 9, "value": {}}
    commits = [{"time": t, "process": "g/c0", "type": "ok", "f": "commit", "op": 10 + i,
                "value": {"group": "g", "queue": queue, "offset": offset}}
               for i, (t, queue, offset) in enumerate([(2.0, 0, 2), (4.0, 1, 1)])]
    figures = availability(sends + [fault] + commits, healed_at=3.0)
    assert figures["faults"] == 1 and figures["acked"] == 3 and figures["fault_to_ack_max_s"] == 0.5
    assert figures["longest_without_ack_s"] == 1.0 and figures["heal_to_ack_s"] is None
    assert figures["heal_to_drain_s"] == 1.0  # queue 1's last send was committed past at 4.0
    assert availability(sends, healed_at=3.0)["heal_to_drain_s"] is None  # no consumers
    assert availability(sends + commits, healed_at=0.1)["heal_to_drain_s"] == 0.0  # nothing acked before the heal


def test_the_standby_holds_every_acknowledged_send_once_and_in_order():
    records = CLEAN + history(unknown("p2", "p2-0"))
    source = {Q0: [(0, "p0-0"), (1, "p0-1")], Q1: [(0, "p1-0"), (1, "p2-0")]}
    assert pipeline(records, source, source).ok
    result = pipeline(records, source, {Q0: [(0, "p0-1"), (1, "p0-0"), (2, "p0-1")], Q1: [(0, "ghost-0")]})
    assert result.counts == {"acked": 3, "missing": 2, "twice": 1, "never sent": 1, "out of order": 1}


def test_the_standby_holds_a_resent_value_as_many_times_as_the_source():
    records = CLEAN + history(("p0", "p0-1", "info", None, None, None))  # sent again after no answer
    source = {Q0: [(0, "p0-0"), (1, "p0-1"), (2, "p0-1")], Q1: [(0, "p1-0")]}
    assert pipeline(records, source, source).ok
    once = pipeline(records, source, {Q0: [(0, "p0-0"), (1, "p0-1")], Q1: [(0, "p1-0")]})
    assert once.counts["missing"] == 1 and once.examples == ["p0-1"]  # one of the source's messages is not there
    thrice = pipeline(records, source, {Q0: [(0, "p0-0"), (1, "p0-1"), (2, "p0-1"), (3, "p0-1")], Q1: [(0, "p1-0")]})
    assert thrice.counts["twice"] == 1


SOURCE = {Q0: [(0, "p0-0"), (1, "p0-1"), (2, "p0-2")]}
STANDBY_Q0 = "Standby:0"
STANDBY = {STANDBY_Q0: [(0, "p0-0"), (1, "p0-1"), (2, "p0-2")]}


def checkpoint_ops(*ops):
    """Records given as ("commit", offset): a commit of source queue 0 invoked by group g, or
    ("translated", offset): g's offset seen on the standby's queue 0."""
    records = []
    for op, (f, offset) in enumerate(ops):
        if f == "commit":
            records.append({"time": op, "process": "g/c0", "type": "invoke", "f": "commit", "op": op,
                            "value": {"group": "g", "queue": 0, "offset": offset}})
        else:
            records.append({"time": op, "process": "checkpoint-watch", "type": "ok", "f": "translated", "op": op,
                            "value": "g", "offsets": {STANDBY_Q0: offset}})
    return records


def test_translated_offsets_that_follow_the_source_commits_pass():
    records = checkpoint_ops(("translated", 0), ("commit", 2), ("translated", 2), ("commit", 3),
                             ("translated", 2), ("translated", 3))
    result = translations(records, SOURCE, STANDBY)
    assert result.ok and result.counts["offsets seen"] == 4


def test_a_translated_offset_that_goes_back_fails():
    result = translations(checkpoint_ops(("commit", 3), ("translated", 3), ("translated", 1)), SOURCE, STANDBY)
    assert not result.ok and result.counts["moved back"] == 1 and result.examples == [("g", STANDBY_Q0, 1, 3)]


def test_a_translated_offset_past_what_the_group_committed_on_the_source_fails():
    """The standby's message at offset 2 (p0-2) is at source offset 2, which only a commit of 3
    leaves behind; a commit invoked after the offset was seen does not count."""
    result = translations(checkpoint_ops(("commit", 2), ("translated", 3), ("commit", 3)), SOURCE, STANDBY)
    assert not result.ok and result.counts["past the source's commits"] == 1
    assert result.examples == [("g", STANDBY_Q0, 3, "p0-2")]


def test_a_value_stored_twice_on_the_source_is_past_the_commits_if_either_copy_is():
    """p0-1 was resent after an unknown outcome and stored in queues 0 and 1; queue 0's commit
    of 2 leaves its first copy behind."""
    source = {**SOURCE, Q1: [(0, "p0-1")]}
    assert translations(checkpoint_ops(("commit", 2), ("translated", 2)), source, STANDBY).ok


def test_a_translated_offset_past_what_the_standby_holds_fails():
    result = translations(checkpoint_ops(("commit", 3), ("translated", 4)), SOURCE, STANDBY)
    assert result.counts["past the source's commits"] == 1


def churn_history(*steps):
    """W4 records from (f, value, outcome) steps, one op each, in time order; a churn-send's topic
    is the part of its value before "/"."""
    records = []
    for op, (f, value, outcome) in enumerate(steps):
        extra = {"topic": value.partition("/")[0]} if f == "churn-send" else {}
        records.append({"time": op, "process": "churn", "type": "invoke", "f": f, "op": op, "value": value, **extra})
        records.append({"time": op + 0.5, "process": "churn", "type": outcome, "f": f, "op": op, "value": value})
    return records


def test_c11_passes_a_deleted_life_gone_and_the_new_one_kept():
    records = churn_history(("create-topic", "A", "ok"), ("churn-send", "A/0-0", "ok"), ("delete-topic", "A", "ok"),
                            ("create-topic", "A", "ok"), ("churn-send", "A/1-0", "ok"))
    final = {"A": {"m": {"broker-a:0": [(0, "A/1-0")]}, "s": {"broker-a:0": [(0, "A/1-0")]}}}
    result = churn(records, final, "m", {"m", "s"})
    assert result.ok and result.counts["acked"] == 2 and result.counts["deletes"] == 1


def test_c11_catches_a_deleted_topic_that_came_back_and_a_lost_send_of_the_new_life():
    records = churn_history(("churn-send", "A/0-0", "ok"), ("delete-topic", "A", "ok"), ("churn-send", "A/1-0", "ok"))
    final = {"A": {"m": {"broker-a:0": [(0, "A/0-0")]}, "s": {}}}
    result = churn(records, final, "m", {"m", "s"})
    assert (result.counts["came back"], result.counts["lost"]) == (1, 1) and not result.ok


def test_c11_allows_either_outcome_after_a_delete_of_unknown_outcome():
    records = churn_history(("churn-send", "A/0-0", "ok"), ("delete-topic", "A", "info"))
    for stored in ([], [(0, "A/0-0")]):
        assert churn(records, {"A": {"m": {"broker-a:0": stored}}}, "m", {"m"}).ok


class FifoHistory:
    """W6 records made by hand: each call adds one operation, its invocation at `start` and its
    completion (`outcome`) at `end` (times in seconds); a receive's values may carry their
    delivery attempt as ("g0-1", 2)."""

    def __init__(self):
        self.records = []

    def _op(self, process, f, value, start, end, outcome="ok", invoked=None, **completed):
        op = len(self.records)
        self.records.append({"time": start, "process": process, "type": "invoke", "f": f, "op": op, "value": value,
                             **(invoked or {})})
        self.records.append({"time": end, "process": process, "type": outcome, "f": f, "op": op, "value": value,
                             **completed})
        return self

    def send(self, value, at, outcome="ok"):
        return self._op("fifo-p0", "fifo-send", value, at, at + 0.01, outcome)

    def receive(self, process, start, end, *values, invisible_s=5, outcome="ok"):
        messages = [{"value": value, "id": value.upper(), "queue": 0, "offset": 0, "attempt": attempt}
                    for value, attempt in (item if isinstance(item, tuple) else (item, 1) for item in values)]
        return self._op(process, "fifo-receive", {"group": "G"}, start, end, outcome,
                        {"invisible_s": invisible_s}, **({"messages": messages} if outcome == "ok" else {}))

    def ack(self, process, value, at, outcome="ok", end=None):
        return self._op(process, "fifo-ack", value, at, end or at + 0.01, outcome)

    def fail(self, process, value, at):
        return self._op(process, "fifo-fail", value, at, at + 0.01, invoked={"how": "nack"})

    def crash(self, process, at):
        return self._op(process, "fifo-crash", process, at, at + 1)

    def dead(self, at, *values):
        messages = [{"value": value, "id": value.upper(), "attempt": 1} for value in values]
        return self._op("fifo-dlq", "dlq-receive", {"group": "DLQ"}, at, at + 0.1, messages=messages)


MAX_ATTEMPTS = 4


def sent(*values):
    history = FifoHistory()
    for index, value in enumerate(values):
        history.send(value, index * 0.01)
    return history


def test_c12_passes_groups_consumed_in_order_with_failures_crashes_and_a_dead_letter():
    h = sent("g0-0", "g0-1", "g1-0", "g1-1", "g2-0")
    h.receive("c0", 1, 1.1, "g0-0", "g1-0", "g1-1").ack("c0", "g0-0", 1.2)
    h.fail("c0", "g1-0", 1.3)  # g1-1 behind it stays unacked: it comes back with g1-0
    h.receive("c1", 1.2, 1.3, "g0-1", "g2-0").ack("c1", "g0-1", 1.4).crash("c1", 1.5)  # g2-0 held
    h.receive("c0", 2.5, 2.6, ("g1-0", 2), ("g1-1", 2)).ack("c0", "g1-0", 2.7).ack("c0", "g1-1", 2.8)
    h.receive("c2", 7, 7.1, ("g2-0", 2)).fail("c2", "g2-0", 7.2)
    h.receive("c2", 8.3, 8.4, ("g2-0", 3)).fail("c2", "g2-0", 8.5)
    h.receive("c0", 9.6, 9.7, ("g2-0", 4)).fail("c0", "g2-0", 9.8)
    h.dead(11, "g2-0")
    result = fifo(h.records, MAX_ATTEMPTS)
    assert result.ok, result
    assert result.counts == {"acked sends": 5, "receives": 6, "deliveries": 10, "redeliveries": 5, "acks": 4,
                             "failures injected": 4, "crashes": 1, "dead letters": 1, "out of order": 0, "lost": 0,
                             "never settled": 0, "dead-lettered early": 0}


def test_c12_fails_a_later_message_handed_out_while_an_earlier_one_is_leased():
    h = sent("g0-0", "g0-1")
    h.receive("c0", 1, 1.1, "g0-0").receive("c1", 1.2, 1.3, "g0-1")
    h.ack("c0", "g0-0", 1.4).ack("c1", "g0-1", 1.5)
    result = fifo(h.records, MAX_ATTEMPTS)
    assert not result.ok and result.counts["out of order"] == 1 and result.examples == [("g0-0", "g0-1")]


def test_c12_fails_a_later_message_before_the_earlier_one_was_ever_handed_out():
    h = sent("g0-0", "g0-1").receive("c0", 1, 1.1, "g0-1").receive("c1", 2, 2.1, "g0-0")
    h.ack("c1", "g0-0", 3).ack("c0", "g0-1", 3)
    result = fifo(h.records, MAX_ATTEMPTS)
    assert result.counts["out of order"] == 1 and result.examples == [("g0-0", "g0-1")]


def test_c12_takes_one_receive_s_messages_in_their_order():
    in_order = sent("g0-0", "g0-1").receive("c0", 1, 1.1, "g0-0", "g0-1").ack("c0", "g0-0", 1.2).ack("c0", "g0-1", 1.3)
    assert fifo(in_order.records, MAX_ATTEMPTS).ok
    reversed_ = sent("g0-0", "g0-1").receive("c0", 1, 1.1, "g0-1", "g0-0").ack("c0", "g0-0", 1.2).ack("c0", "g0-1", 1.3)
    assert fifo(reversed_.records, MAX_ATTEMPTS).examples == [("g0-0", "g0-1")]


def test_c12_passes_a_later_message_after_an_ack_that_may_have_landed_first():
    """The ack of g0-0 was invoked before the receive of g0-1 completed; its answer came later."""
    h = sent("g0-0", "g0-1").receive("c0", 1, 1.1, "g0-0").ack("c0", "g0-0", 1.2, end=1.6)
    h.receive("c1", 1.3, 1.4, "g0-1").ack("c1", "g0-1", 1.5)
    assert fifo(h.records, MAX_ATTEMPTS).ok
    unanswered = sent("g0-0", "g0-1").receive("c0", 1, 1.1, "g0-0").ack("c0", "g0-0", 1.2, outcome="info")
    unanswered.receive("c1", 1.3, 1.4, "g0-1").ack("c1", "g0-1", 1.5)
    assert fifo(unanswered.records, MAX_ATTEMPTS).ok


def test_c12_passes_other_groups_while_one_is_blocked():
    h = sent("g0-0", "g0-1", "g1-0").receive("c0", 1, 1.1, "g0-0").receive("c1", 1.2, 1.3, "g1-0")
    h.ack("c1", "g1-0", 1.4).ack("c0", "g0-0", 2).receive("c0", 2.1, 2.2, "g0-1").ack("c0", "g0-1", 2.3)
    assert fifo(h.records, MAX_ATTEMPTS).ok


def dead_lettered_g0_0(*later_receive):
    """g0-0 handed out at 1-1.1 for 5 s, then dead-lettered; g0-1 handed out by `later_receive`."""
    h = sent("g0-0", "g0-1").receive("c0", 1, 1.1, ("g0-0", 4), invisible_s=5)
    h.receive(*later_receive, "g0-1").ack(later_receive[0], "g0-1", later_receive[2] + 0.1)
    return h.dead(20, "g0-0")


def test_c12_fails_a_later_message_while_a_dead_letter_s_lease_is_certainly_valid():
    result = fifo(dead_lettered_g0_0("c1", 2, 5.9).records, MAX_ATTEMPTS)
    assert result.counts["out of order"] == 1 and result.examples == [("g0-0", "g0-1")]


def test_c12_passes_a_later_message_once_a_dead_letter_s_lease_may_have_ended():
    """A slow machine: the receive of g0-1 completed after t0 + d, so the lease may have expired
    and g0-0 gone to the DLQ first; nor is a receive judged that overlapped the lease's receive."""
    assert fifo(dead_lettered_g0_0("c1", 2, 6.1).records, MAX_ATTEMPTS).ok
    assert fifo(dead_lettered_g0_0("c1", 1.05, 1.2).records, MAX_ATTEMPTS).ok
    failed = dead_lettered_g0_0("c1", 2, 3).fail("c0", "g0-0", 1.5)  # the consumer gave it back at 1.5
    assert fifo(failed.records, MAX_ATTEMPTS).ok
    crashed = dead_lettered_g0_0("c1", 2, 3).crash("c0", 1.5)
    assert fifo(crashed.records, MAX_ATTEMPTS).ok


def test_c12_fails_an_acknowledged_send_neither_received_nor_dead_lettered():
    h = sent("g0-0", "g0-1").send("g0-2", 0.1, outcome="info")  # unknown: it may be missing
    h.receive("c0", 1, 1.1, "g0-0").ack("c0", "g0-0", 1.2)
    result = fifo(h.records, MAX_ATTEMPTS)
    assert result.counts["lost"] == 1 and result.examples == ["g0-1"]


def test_c12_fails_a_received_message_never_acked_nor_dead_lettered():
    h = sent("g0-0", "g1-0").receive("c0", 1, 1.1, "g0-0", "g1-0").ack("c0", "g0-0", 1.2)
    result = fifo(h.records, MAX_ATTEMPTS)
    assert result.counts["never settled"] == 1 and result.examples == ["g1-0"]
    h.ack("c0", "g1-0", 1.3, outcome="fail")  # refused: the lease had expired, it must come back
    assert fifo(h.records, MAX_ATTEMPTS).counts["never settled"] == 1


def test_c12_fails_a_dead_letter_before_its_last_attempt():
    h = sent("g0-0").receive("c0", 1, 1.1, "g0-0").receive("c1", 7, 7.1, ("g0-0", 2)).dead(20, "g0-0")
    result = fifo(h.records, MAX_ATTEMPTS)
    assert result.counts["dead-lettered early"] == 1 and result.examples == ["g0-0"]
    assert fifo(h.records, 2).ok


def test_c12_counts_deliveries_the_history_did_not_see_toward_the_last_attempt():
    """Attempt 3 was seen (attempt 2 was not: its count is in the 3), and one receive that began
    after it got no answer: it may have been the fourth delivery. A receive that had ended before
    the last delivery seen was asked for cannot have carried a later one, nor one that failed (it
    could not connect)."""
    h = sent("g0-0").receive("c0", 1, 1.1, "g0-0").receive("c1", 13, 13.1, ("g0-0", 3))
    h.receive("c2", 12, 12.5, outcome="info").receive("c2", 14, 14.1, outcome="fail").dead(30, "g0-0")
    assert fifo(h.records, MAX_ATTEMPTS).counts["dead-lettered early"] == 1  # that failure reached no broker
    h.receive("c2", 14, 19, outcome="info")
    assert fifo(h.records, MAX_ATTEMPTS).ok
