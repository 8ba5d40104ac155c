"""A proxy's merged sends stay within the broker's bounds on one request and keep their order."""

import pytest

from quorumq.core.send_batches import split, take


def test_everything_waiting_goes_when_it_fits():
    assert take([(1, 10)] * 5, 1024, 1000) == 5


@pytest.mark.parametrize("waiting, taken", [
    ([(600, 10), (600, 10)], 1),  # the messages bound
    ([(1, 600), (1, 600)], 1),  # the bytes bound
    ([(300, 100), (300, 100), (300, 100), (300, 100)], 3),
])
def test_a_call_stops_before_a_bound(waiting, taken):
    assert take(waiting, 1024, 1000) == taken


def test_a_send_above_the_bounds_goes_alone():
    assert take([(2000, 5000), (1, 1)], 1024, 1000) == 1


def test_split_gives_each_send_its_entries_in_order():
    entries = list(range(6))
    assert [entries[part] for part in split([1, 3, 2])] == [[0], [1, 2, 3], [4, 5]]
