"""Recovery after a crash. A crash is a copy of an open store's files (what kill -9 leaves: the page
cache, the abort marker, the last checkpoint), damaged on purpose, then opened. Torn tails are cut
at the last whole record; damage in the middle is kept, reported and refused."""

import os
import random

import pytest
from test_store_support import SEGMENT_BYTES, crash_copy, message, new_store, open_store, queue_files, segment_files

from quorumq.core import codec
from quorumq.core.codec import Frame
from quorumq.errors import Error, QuorumqError
from quorumq.store import Damage, classify_damage
from quorumq.store.consume_queue import ENTRY_SIZE

TOPICS = ("A", "B")


def fill(store, seed: int, batches: int = 40) -> list:
    """Append random batches and flush; return every stored message in commit-log order."""
    generator = random.Random(seed)
    index = 0
    for _ in range(batches):
        size = generator.randint(1, 8)
        store.append([message(index + i, topic=generator.choice(TOPICS), queue_id=generator.randrange(2),
                              body_bytes=generator.randint(50, 2500)) for i in range(size)])
        index += size
    store.flush()
    return all_messages(store)


def all_messages(store) -> list:
    found = []
    for topic in TOPICS:
        for queue_id in range(2):
            offset = store.queue_min_offset(topic, queue_id)
            while (result := store.get_messages(topic, queue_id, offset, 64, 1 << 20)).messages:
                found.extend(result.messages)
                offset = result.next_offset
    return sorted(found, key=lambda m: m.commit_log_offset)


def by_queue(messages) -> dict:
    queues: dict = {}
    for m in messages:
        queues.setdefault((m.topic, m.queue_id), []).append((m.queue_offset, m.body))
    return queues


def assert_holds_exactly(store, expected) -> None:
    """The store holds exactly `expected`, with queue offsets from 0 and no gap."""
    assert by_queue(all_messages(store)) == by_queue(expected)
    for topic in TOPICS:
        for queue_id in range(2):
            entries = by_queue(expected).get((topic, queue_id), [])
            assert [offset for offset, _ in entries] == list(range(len(entries)))
            assert store.queue_max_offset(topic, queue_id) == len(entries)


def filled_and_closed(tmp_path, seed: int) -> tuple:
    """A store filled by `fill` and closed cleanly, and what it holds."""
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=seed)
    store.close()
    return store, expected


def first_queue_file(root, topic: str, queue_id: int):
    return root / "consumequeue" / topic / str(queue_id) / f"{0:020d}"


def end_of(messages) -> int:
    return messages[-1].commit_log_offset + messages[-1].store_size if messages else 0


def damage(path, position: int, garbage: bytes | None) -> None:
    """Truncate the file at `position`, or write `garbage` there."""
    if garbage is None:
        os.truncate(path, position)
    else:
        with open(path, "r+b") as file:
            file.seek(position)
            file.write(garbage)


def segment_of(root, offset: int):
    return root / "commitlog" / f"{offset - offset % SEGMENT_BYTES:020d}"


def test_crash_without_damage_loses_nothing(tmp_path):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=1)
    copy = new_store(crash_copy(store, tmp_path / "copy"))
    report = copy.open()
    assert not report.clean_shutdown and report.truncated_bytes == 0 and report.corrupt_offset is None
    assert copy.max_offset == report.end_offset == store.max_offset
    assert_holds_exactly(copy, expected)
    assert queue_files(copy.root) == queue_files(store.root)
    copy.close()
    store.close()


@pytest.mark.parametrize("seed", range(12))
def test_torn_tail_is_cut_at_the_last_whole_record(tmp_path, seed):
    generator = random.Random(seed)
    store = open_store(tmp_path / "s")
    expected = fill(store, seed)
    end = store.max_offset
    active_start = int(segment_files(store.root)[-1].name)
    copy_root = crash_copy(store, tmp_path / "copy")
    cut = generator.randrange(max(active_start, end - 12_000), end)
    garbage = None if seed % 2 else generator.randbytes(end - cut + generator.randrange(100))
    damage(segment_of(copy_root, cut), cut - active_start, garbage)

    copy = new_store(copy_root)
    report = copy.open()
    kept = [m for m in expected if m.commit_log_offset + m.store_size <= cut]
    assert report.end_offset == copy.max_offset == max(end_of(kept), active_start if cut >= active_start else 0)
    assert report.corrupt_offset is None and (garbage is None or report.truncated_bytes > 0)
    assert_holds_exactly(copy, kept)
    assert all(path.stat().st_size == SEGMENT_BYTES for path in segment_files(copy_root))
    # Queues go on where the kept records end, and all of it survives another restart.
    appended = copy.append([message(10_000, topic="A", queue_id=0)])
    assert appended.offsets[0][1] == sum(1 for m in kept if (m.topic, m.queue_id) == ("A", 0))
    after_append = all_messages(copy)
    copy.close()
    assert copy.open().truncated_bytes == 0
    assert all_messages(copy) == after_append
    copy.close()
    store.close()


def test_lost_consume_queue_entries_are_dispatched_again(tmp_path):
    store = open_store(tmp_path / "s", consume_queue_entries_per_file=8)
    fill(store, seed=2, batches=10)
    store.checkpoint()  # entries so far are durable; recovery dispatches from here
    expected = fill(store, seed=3, batches=10)
    copy_root = crash_copy(store, tmp_path / "copy")
    for path in (copy_root / "consumequeue").rglob("0000*"):
        size = path.stat().st_size
        if size > 3 * ENTRY_SIZE and int(path.name) == max(int(p.name) for p in path.parent.iterdir()):
            os.truncate(path, size - 2 * ENTRY_SIZE - 7)  # two entries and a torn third lost
    copy = new_store(copy_root, consume_queue_entries_per_file=8)
    report = copy.open()
    assert report.records_redispatched > 0
    assert_holds_exactly(copy, expected)
    assert queue_files(copy_root) == queue_files(store.root)
    copy.close()
    store.close()


def test_empty_segment_after_the_end_is_deleted(tmp_path):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=4, batches=5)
    copy_root = crash_copy(store, tmp_path / "copy")
    next_start = int(segment_files(copy_root)[-1].name) + SEGMENT_BYTES
    (copy_root / "commitlog" / f"{next_start:020d}").write_bytes(bytes(SEGMENT_BYTES))
    copy = open_store(copy_root)
    assert int(segment_files(copy_root)[-1].name) < next_start and copy.max_offset == store.max_offset
    assert_holds_exactly(copy, expected)
    copy.close()
    store.close()


def crash_with_flipped_byte(tmp_path, store, offset: int):
    copy_root = crash_copy(store, tmp_path / "copy")
    segment = segment_of(copy_root, offset)
    damage(segment, offset % SEGMENT_BYTES, bytes([0x55 ^ segment.read_bytes()[offset % SEGMENT_BYTES]]))
    return copy_root


def assert_refuses_past(store, corrupt, expected) -> None:
    """Reads before the corrupt record work; at or past it they fail; appends fail."""
    for m in expected:
        if m.commit_log_offset < corrupt.commit_log_offset:
            got = store.get_messages(m.topic, m.queue_id, m.queue_offset, 1, 1 << 20).messages
            assert got and got[0].body == m.body
        else:
            with pytest.raises(QuorumqError) as raised:
                store.get_messages(m.topic, m.queue_id, m.queue_offset, 1, 1 << 20)
            assert raised.value.error is Error.STORE_CORRUPTED
    with pytest.raises(QuorumqError) as raised:
        store.append([message(0)])
    assert raised.value.error is Error.STORE_CORRUPTED
    with pytest.raises(QuorumqError):
        store.read_raw(corrupt.commit_log_offset, 1 << 20)


@pytest.mark.parametrize("where", ["sealed segment", "before a valid record", "covered by the checkpoint"])
def test_corruption_in_the_middle_is_reported_and_refused(tmp_path, where):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=6)
    active_start = int(segment_files(store.root)[-1].name)
    if where == "sealed segment":
        corrupt = expected[3]
    elif where == "before a valid record":
        corrupt = [m for m in expected if m.commit_log_offset >= active_start][-2]
    else:
        store.checkpoint()
        corrupt = expected[-1]
    assert corrupt.commit_log_offset >= active_start or where == "sealed segment"
    copy_root = crash_with_flipped_byte(tmp_path, store, corrupt.commit_log_offset + corrupt.store_size - 3)
    sizes = [path.stat().st_size for path in segment_files(copy_root)]

    copy = new_store(copy_root)
    report = copy.open()
    assert report.corrupt_offset == copy.corrupt_offset == corrupt.commit_log_offset
    assert report.truncated_bytes == 0 and copy.max_offset == store.max_offset  # nothing was cut
    assert [path.stat().st_size for path in segment_files(copy_root)] == sizes
    assert_refuses_past(copy, corrupt, expected)
    copy.close()
    assert (copy_root / "abort").exists()  # the next open checks again
    assert copy.open().corrupt_offset == corrupt.commit_log_offset
    copy.close()
    store.close()


def test_truncated_sealed_segment_is_corruption_not_a_tail(tmp_path):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=7)
    copy_root = crash_copy(store, tmp_path / "copy")
    victim = next(m for m in expected if m.commit_log_offset >= SEGMENT_BYTES)
    damage(segment_of(copy_root, victim.commit_log_offset), victim.commit_log_offset % SEGMENT_BYTES + 5, None)
    copy = new_store(copy_root)
    assert copy.open().corrupt_offset == victim.commit_log_offset
    assert_refuses_past(copy, victim, expected)
    copy.close()
    store.close()


def test_corruption_found_on_read_is_refused_from_then_on(tmp_path):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=8, batches=6)
    victim = expected[2]
    path = segment_of(store.root, victim.commit_log_offset)
    damage(path, victim.commit_log_offset % SEGMENT_BYTES + victim.store_size - 1, b"\x00\x01")
    result = store.get_messages(victim.topic, victim.queue_id, 0, 64, 1 << 20)
    assert all(m.commit_log_offset < victim.commit_log_offset for m in result.messages)
    assert store.corrupt_offset == victim.commit_log_offset
    assert_refuses_past(store, victim, expected)
    store.close()


def test_classify_damage():
    end = Frame.EMPTY
    assert classify_damage(end, 1000, 1000, False, False) is None
    assert classify_damage(end, 999, 1000, False, False) is Damage.MIDDLE  # zeros where fsynced data was
    assert classify_damage(end, 1000, 0, True, False) is Damage.MIDDLE  # a hole with data after it
    for frame in (Frame.SHORT, Frame.BAD_FRAMING, Frame.BAD_CRC):
        assert classify_damage(frame, 1000, 500, False, False) is Damage.TAIL
        assert classify_damage(frame, 400, 500, False, False) is Damage.MIDDLE
        assert classify_damage(frame, 1000, 500, True, False) is Damage.MIDDLE
    assert classify_damage(Frame.BAD_CRC, 1000, 500, False, True) is Damage.MIDDLE
    with pytest.raises(ValueError):
        classify_damage(Frame.MESSAGE, 0, 0, False, False)


def test_lost_durable_consume_queue_entries_stop_the_open(tmp_path):
    store = open_store(tmp_path / "s")
    fill(store, seed=9, batches=10)
    store.checkpoint()  # the checkpoint vouches for every entry so far
    fill(store, seed=10, batches=3)
    copy_root = crash_copy(store, tmp_path / "copy")
    victim = sorted((copy_root / "consumequeue" / "A").rglob("0000*"))[0]
    os.truncate(victim, 0)
    with pytest.raises(QuorumqError) as raised:
        new_store(copy_root).open()
    assert raised.value.error is Error.STORE_CORRUPTED
    store.close()


def flip_queue_offset(root, victim) -> None:
    """Damage the queue offset of a record: it lies outside the CRC, so the frame check passes."""
    position = victim.commit_log_offset % SEGMENT_BYTES + codec.ASSIGNED_POSITION + 7  # its low byte
    path = segment_of(root, victim.commit_log_offset)
    damage(path, position, bytes([path.read_bytes()[position] ^ 0x04]))


def test_a_damaged_queue_offset_is_kept_as_corruption_by_recovery(tmp_path):
    # Refusing to open would keep the broker down; kept as corruption, a slave repairs it.
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=11)  # no checkpoint since the open: recovery dispatches everything again
    copy_root = crash_copy(store, tmp_path / "copy")
    victim = [m for m in expected if (m.topic, m.queue_id) == ("A", 0)][5]
    flip_queue_offset(copy_root, victim)
    copy = new_store(copy_root)
    assert copy.open().corrupt_offset == victim.commit_log_offset
    assert_refuses_past(copy, victim, expected)
    copy.close()
    store.close()


def test_a_damaged_queue_offset_is_found_at_open_after_a_clean_shutdown(tmp_path):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=12, batches=6)
    store.close()  # clean: nothing is dispatched again, yet every record is checked
    victim = expected[2]
    flip_queue_offset(store.root, victim)
    assert store.open().corrupt_offset == victim.commit_log_offset
    result = store.get_messages(victim.topic, victim.queue_id, 0, 64, 1 << 20)
    assert all(m.commit_log_offset < victim.commit_log_offset for m in result.messages)
    assert_refuses_past(store, victim, expected)
    store.close()


def test_a_flipped_bit_in_a_sealed_segment_is_found_at_open_after_a_clean_shutdown(tmp_path):
    store = open_store(tmp_path / "s")
    expected = fill(store, seed=13)
    store.close()  # clean: the checkpoint vouches for everything, yet every record is checked
    victim = expected[3]
    assert victim.commit_log_offset < int(segment_files(store.root)[-1].name)  # a sealed segment
    position = victim.commit_log_offset + victim.store_size - 3
    path = segment_of(store.root, position)
    damage(path, position % SEGMENT_BYTES, bytes([0x04 ^ path.read_bytes()[position % SEGMENT_BYTES]]))
    assert store.open().corrupt_offset == victim.commit_log_offset
    assert_refuses_past(store, victim, expected)
    store.close()


def test_a_damaged_consume_queue_entry_is_written_again_from_the_log(tmp_path):
    store, expected = filled_and_closed(tmp_path, seed=14)
    victim = [m for m in expected if (m.topic, m.queue_id) == ("B", 1)][4]
    path = first_queue_file(store.root, "B", 1)
    position = victim.queue_offset * ENTRY_SIZE + 2  # a high byte of its commit-log offset
    damage(path, position, bytes([0x10 ^ path.read_bytes()[position]]))
    report = store.open()
    assert report.entries_repaired == 1 and report.corrupt_offset is None
    assert_holds_exactly(store, expected)
    store.close()


def test_a_damaged_tag_hash_in_an_entry_is_written_again_not_taken_for_its_records_damage(tmp_path):
    """F10 seed 1385344032 (weak settings): a bit flipped in an entry's tag hash was taken for
    damage to the record the entry points at; the slave cut its log there, kept the queue's
    entries past the cut, and refused every record the master sent it from then on."""
    store, expected = filled_and_closed(tmp_path, seed=21)
    victim = [m for m in expected if (m.topic, m.queue_id) == ("B", 1)][4]
    path = first_queue_file(store.root, "B", 1)
    position = victim.queue_offset * ENTRY_SIZE + ENTRY_SIZE - 2  # a low byte of its tag hash
    damage(path, position, bytes([0x04 ^ path.read_bytes()[position]]))
    report = store.open()
    assert report.entries_repaired == 1 and report.corrupt_offset is None
    assert_holds_exactly(store, expected)
    store.close()


def test_a_topic_made_again_after_deletion_is_not_taken_for_damage(tmp_path):
    store = open_store(tmp_path / "s")
    fill(store, seed=15, batches=10)
    store.delete_topic("A")
    expected = [m for m in fill(store, seed=16, batches=10)]  # "A" starts again at queue offset 0
    store.close()
    report = store.open()
    assert report.corrupt_offset is None and report.entries_repaired == 0
    assert_holds_exactly(store, expected)
    store.close()


def test_a_damaged_entry_past_the_checkpoint_is_written_again_after_a_crash(tmp_path):
    store = open_store(tmp_path / "s")
    fill(store, seed=17, batches=10)
    store.checkpoint()
    expected = fill(store, seed=18, batches=10)  # their entries exist, past the checkpoint
    copy_root = crash_copy(store, tmp_path / "copy")
    victim = [m for m in expected if (m.topic, m.queue_id) == ("A", 0)][-2]
    path = first_queue_file(copy_root, "A", 0)
    damage(path, victim.queue_offset * ENTRY_SIZE + 4, b"\x7f")
    copy = new_store(copy_root)
    assert copy.open().entries_repaired == 1
    assert_holds_exactly(copy, expected)
    copy.close()
    store.close()


def test_a_damaged_queue_offset_in_a_queues_first_record_is_corruption_and_leaves_the_entries_alone(tmp_path):
    store, expected = filled_and_closed(tmp_path, seed=19)
    victim = [m for m in expected if (m.topic, m.queue_id) == ("A", 1)][0]  # no record of its queue before it
    flip_queue_offset(store.root, victim)  # 0 becomes 4: the record at 4 keeps its entry
    entries = queue_files(store.root)
    assert store.open().corrupt_offset == victim.commit_log_offset
    assert queue_files(store.root) == entries
    assert_refuses_past(store, victim, expected)
    store.close()


def test_a_damaged_first_entry_of_a_queue_is_no_reason_to_doubt_its_records(tmp_path):
    store, expected = filled_and_closed(tmp_path, seed=20)
    path = first_queue_file(store.root, "B", 0)
    damage(path, 0, b"\x40")  # the first entry's commit-log offset: far past the log
    report = store.open()
    assert report.corrupt_offset is None and report.entries_repaired == 0
    later = [m for m in expected if (m.topic, m.queue_id) == ("B", 0)][1:]
    assert all(store.get_messages(m.topic, m.queue_id, m.queue_offset, 1, 1 << 20).messages[0].body == m.body
               for m in later)
    store.close()
