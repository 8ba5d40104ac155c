import pytest

from quorumq.core.retention import disk_used_ratio, parse_delete_when, retention_action


def test_delete_when_hours():
    assert parse_delete_when("04") == {4}
    assert parse_delete_when("04;16") == {4, 16}
    for bad in ("", "24", "x"):
        with pytest.raises(ValueError):
            parse_delete_when(bad)


@pytest.mark.parametrize("hour, ratio, expected", [
    (3, 0.10, (False, False, True)),   # quiet hour, empty disk: nothing happens
    (4, 0.10, (True, False, True)),    # the configured hour: expired files go
    (3, 0.80, (True, False, True)),    # above diskMaxUsedSpaceRatio: expired files go at any hour
    (3, 0.86, (True, True, True)),     # above the forcible ratio: unexpired files go too
    (3, 0.95, (True, True, False)),    # above the warning level: writes refused
])
def test_retention_action(hour, ratio, expected):
    action = retention_action(hour, frozenset({4}), ratio, max_used_ratio=0.75, force_ratio=0.85,
                              warning_ratio=0.90)
    assert (action.delete_expired, action.force, action.writable) == expected


def test_blocks_no_writer_may_use_count_neither_way():
    """statvfs of this machine's disk: 66,053,021 blocks, 48,674,810 free, 9,219,517 available (df: 66%
    used). Reserved blocks are not used space: RocketMQ's formula reads 0.65, where 1 - available /
    total read 0.86, past diskSpaceCleanForciblyRatio (0.85), and retention deleted unexpired data."""
    assert disk_used_ratio(66_053_021, 48_674_810, 9_219_517) == pytest.approx(0.6534, abs=1e-4)
    assert disk_used_ratio(100, 100, 95) == 0.0  # empty, 5% reserved
    assert disk_used_ratio(100, 5, 0) == 1.0  # full: nothing left to a writer, whatever is reserved
    assert disk_used_ratio(100, 50, 50) == 0.5
    assert disk_used_ratio(0, 0, 0) == 0.0
