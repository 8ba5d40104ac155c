"""Master epochs (core/epochs.py) and the epoch file (store/epoch_file.py) against spec
rocketmq-ha.md 2.9 and scenario 27 (RocketMQ's EpochFileCacheTest)."""

import pytest

from quorumq.core.epochs import EpochCache, EpochEntry, find_consistent_point
from quorumq.store.epoch_file import EpochFile


def base() -> EpochCache:
    return EpochCache([(1, 100), (2, 300), (3, 500)])


def test_scenario_27_consistent_points():
    assert find_consistent_point(base(), 700, EpochCache([(1, 100), (2, 300), (3, 450)]), 800) == 450
    assert find_consistent_point(base(), 700, base(), 600) == 600
    assert find_consistent_point(base(), 700, EpochCache([(1, 200), (2, 500)]), 900) == -1
    assert find_consistent_point(base(), 700, EpochCache([(1, 100), (2, 300), (3, 500), (4, 800)]), 900) == 700


def test_an_empty_log_agrees_with_any_master_at_zero():
    """A master that died before its first message holds epoch 1 and no bytes; its successor's
    log begins with epoch 2. It used to share no epoch with it and never rejoined."""
    assert find_consistent_point(EpochCache([(1, 0)]), 0, EpochCache([(2, 0)]), 0) == 0
    assert find_consistent_point(EpochCache([]), 0, EpochCache([(2, 0)]), 300) == 0
    assert find_consistent_point(EpochCache([]), 300, EpochCache([(2, 0)]), 300) == -1


def test_scenario_27_truncation_and_lookup():
    cache = base()
    assert cache.entry_for_offset(350) == EpochEntry(2, 300, 500)
    assert cache.entry_for_offset(50) is None
    cache.truncate_suffix_by_offset(150)
    assert cache.entries == [EpochEntry(1, 100, None)]  # decision 2: the last entry is open again


def test_append_refuses_older_epochs_and_starts_and_replaces_an_empty_epoch():
    cache = base()
    assert not cache.append(3, 900) and not cache.append(4, 400)
    assert cache.append(4, 500)  # epoch 3 wrote nothing: replaced (decision 1)
    assert cache.pairs() == [(1, 100), (2, 300), (4, 500)]
    assert cache.end_of(2) == 500 and cache.end_of(4) is None


def test_truncations_by_epoch_and_prefix_and_reconcile():
    cache = base()
    cache.truncate_suffix_by_epoch(3)
    assert cache.last_epoch == 2
    cache = base()
    cache.truncate_prefix_by_offset(300)
    assert cache.pairs() == [(2, 300), (3, 500)]
    cache = base()
    cache.reconcile(500)
    assert cache.pairs() == [(1, 100), (2, 300), (3, 500)]  # an epoch starting at the end stays (decision 3)
    cache.reconcile(499)
    assert cache.pairs() == [(1, 100), (2, 300)]


def test_encoding_round_trips_and_rejects_damage():
    data = base().encode()
    assert EpochCache.decode(data).pairs() == base().pairs()
    for damaged in (data[:-3], data.replace(b"3-500", b"3-501"), b"x", b"\xff\xfe"):
        with pytest.raises(ValueError):
            EpochCache.decode(damaged)


def test_the_file_falls_back_to_its_copy_and_saves_an_empty_cache(tmp_path):
    epoch_file = EpochFile(tmp_path)
    assert epoch_file.load().pairs() == []
    epoch_file.save(base())
    epoch_file.path.write_bytes(epoch_file.path.read_bytes()[:-4])  # a torn main file
    assert epoch_file.load().pairs() == base().pairs()
    epoch_file.save(EpochCache())
    assert epoch_file.load().pairs() == []
