import pytest

from quorumq.core.retention import parse_delete_when, retention_action


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
