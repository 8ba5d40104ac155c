"""The append-only key -> value log under topic configs and consumer groups (store/keyed_log.py):
replay, deletes, compaction, a torn tail, a failed write, the old whole-file form, and the bound
on consumer groups."""

import errno
import json
import os

import pytest
from test_store_full_disk import fill
from test_store_support import ManualClock

from quorumq import limits
from quorumq.broker.consumers import ConsumerGroups
from quorumq.config import Config, Kind
from quorumq.errors import Error, QuorumqError
from quorumq.store import KeyedLog, MemoryStore, TopicConfig, TopicConfigs
from quorumq.store import keyed_log as keyed_log_module


def opened(path, **options) -> KeyedLog:
    log = KeyedLog(path, "things", **options)
    log.load()
    return log


def lines(path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_changes_are_replayed_and_one_call_is_one_record(tmp_path):
    path = tmp_path / "things.log"
    log = opened(path)
    assert log.put("a", {"n": 1}) and log.put("b", 2) and log.put("c", [3])
    assert not log.put("b", 2) and not log.delete("nothing")  # no change, no write
    assert log.delete("a")
    assert log.update({"d": 4, "e": 5}, ["c"])
    assert len(lines(path)) == 5  # the first put created the file; each later call appended one record
    again = opened(path)
    assert again.entries == {"b": 2, "d": 4, "e": 5} and "a" not in again and again.get("c") is None


def test_a_long_history_is_compacted_to_its_live_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "KEYED_LOG_SLACK_RECORDS", 8)
    path = tmp_path / "things.log"
    log = opened(path)
    for round_ in range(60):
        log.update({f"k{key}": round_ for key in range(3)}, [] if round_ % 2 else ["k9"])
        log.put("k9", round_)
        assert len(lines(path)) <= limits.KEYED_LOG_RECORDS_PER_ENTRY * len(log) + 8
    assert opened(path).entries == {"k0": 59, "k1": 59, "k2": 59, "k9": 59}


def test_a_torn_last_record_is_dropped_and_the_next_change_rewrites_the_file(tmp_path):
    path = tmp_path / "things.log"
    log = opened(path)
    log.put("kept", 1)
    whole = path.read_bytes()
    for torn in (b'0badc0de {"put":{"lost"', b"\0" * 40 + b"\n"):  # cut short; zeros where a record was
        path.write_bytes(whole + torn)
        again = opened(path)
        assert again.entries == {"kept": 1}
        again.put("next", 2)
        assert path.read_bytes().count(b"\n") == 2 and b"lost" not in path.read_bytes()
        assert opened(path).entries == {"kept": 1, "next": 2}
        path.write_bytes(whole)


def test_a_bad_record_before_the_last_is_store_corrupted(tmp_path):
    path = tmp_path / "things.log"
    log = opened(path)
    log.put("a", 1)
    log.put("b", 2)
    first, second = lines(path)
    path.write_bytes(first.replace(b'"a"', b'"x"') + b"\n" + second + b"\n")
    with pytest.raises(QuorumqError) as raised:
        opened(path)
    assert raised.value.error is Error.STORE_CORRUPTED and "record 1" in str(raised.value)


def test_a_value_that_does_not_decode_is_store_corrupted(tmp_path):
    path = tmp_path / "things.log"
    opened(path).put("a", "not a number")
    with pytest.raises(QuorumqError) as raised:
        opened(path, decode=int)
    assert raised.value.error is Error.STORE_CORRUPTED


@pytest.mark.parametrize("truncate_fails", [False, True])
def test_a_failed_write_changes_nothing_and_is_a_clear_error(tmp_path, monkeypatch, truncate_fails):
    path = tmp_path / "things.log"
    log = opened(path)
    log.put("a", 1)
    before = path.read_bytes()

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keyed_log_module.os, "fsync", no_space)
    if truncate_fails:
        monkeypatch.setattr(keyed_log_module.os, "ftruncate", no_space)
    for change in (lambda: log.put("b", 2), lambda: log.delete("a")):
        with pytest.raises(QuorumqError) as raised:
            change()
        assert raised.value.error is Error.DISK_FULL and "things not written" in str(raised.value)
        assert log.entries == {"a": 1}
    monkeypatch.undo()
    if not truncate_fails:
        assert path.read_bytes() == before  # the failed appends were cut off
    log.put("c", 3)  # else the next change rewrites the file from memory
    assert opened(path).entries == {"a": 1, "c": 3}


def test_the_whole_file_form_of_earlier_versions_is_taken_into_the_log(tmp_path):
    legacy = tmp_path / "things.json"
    legacy.write_text(json.dumps({"a": 1, "b": 2}))
    log = opened(tmp_path / "things.log", legacy=legacy)
    assert log.entries == {"a": 1, "b": 2} and not legacy.exists()
    log.put("c", 3)
    assert opened(tmp_path / "things.log", legacy=legacy).entries == {"a": 1, "b": 2, "c": 3}
    legacy.write_text("{")
    (tmp_path / "things.log").unlink()
    with pytest.raises(QuorumqError) as raised:
        opened(tmp_path / "things.log", legacy=legacy)
    assert raised.value.error is Error.STORE_CORRUPTED


def write_bytes_of_this_process() -> int:
    with open("/proc/self/io") as counters:
        return next(int(line.split()[1]) for line in counters if line.startswith("wchar:"))


def test_one_more_topic_among_thousands_is_one_small_append(tmp_path):
    """An upgraded broker keeps the 2,000 topics of its topics.json; the next topic is written
    without rewriting them: under 1 KiB written, the same file. The old store rewrote the whole
    file (160 KB) at every topic: 10,000 topics took 848 s."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "topics.json").write_text(json.dumps(
        {f"topic-{index}": {"name": f"topic-{index}", "read_queue_nums": 8, "write_queue_nums": 8, "perm": 6}
         for index in range(2000)}))
    topics = TopicConfigs(tmp_path)
    topics.load()
    assert len(topics.all()) == 2000
    before, inode = topics.path.stat().st_size, topics.path.stat().st_ino
    written = write_bytes_of_this_process()
    topics.put(TopicConfig("one-more", 8, 8))
    assert write_bytes_of_this_process() - written < 1024
    assert topics.path.stat().st_ino == inode and 0 < topics.path.stat().st_size - before < 1024
    again = TopicConfigs(tmp_path)
    again.load()
    assert len(again.all()) == 2001 and again.get("one-more") == TopicConfig("one-more", 8, 8)


def test_a_topic_that_could_not_be_written_is_not_kept(small_disk):
    disk = small_disk("1m")
    topics = TopicConfigs(disk)
    topics.load()
    fill(disk / "ballast")
    with pytest.raises(QuorumqError) as raised:
        topics.put(TopicConfig("orders", 8, 8))
    assert raised.value.error is Error.DISK_FULL
    assert topics.get("orders") is None and topics.all() == []
    os.unlink(disk / "ballast")
    again = TopicConfigs(disk)
    again.load()
    assert again.all() == []
    topics.put(TopicConfig("orders", 8, 8))  # once there is room
    again.load()
    assert again.get("orders") == TopicConfig("orders", 8, 8)


def consumer_groups(root) -> ConsumerGroups:
    clock = ManualClock()
    return ConsumerGroups(MemoryStore(clock=clock), root, clock, Config(Kind.BROKER, {}), lambda: None)


def test_an_upgraded_broker_keeps_its_groups_and_bounds_new_ones(tmp_path, monkeypatch):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerGroups.json").write_text(json.dumps({"old": 1, "older": 2}))
    groups = consumer_groups(tmp_path)
    assert groups.groups == {"old": 1, "older": 2}
    assert sorted(path.name for path in (tmp_path / "config").iterdir()) == ["consumerGroups.log"]
    monkeypatch.setattr(limits, "GROUPS_MAX", 3)
    groups.touch("new")
    with pytest.raises(QuorumqError) as raised:
        groups.touch("one-too-many")
    assert raised.value.error is Error.TOO_MANY_REQUESTS
    groups.adopt_groups({"a-slave-copies": 5})  # whatever its master holds
    assert consumer_groups(tmp_path).groups == {"old": 1, "older": 2, "new": ManualClock().now,
                                                "a-slave-copies": 5}
