"""A proxy's merged sends stay within the broker's bounds on one request and keep their order."""

import pytest

from quorumq.core.send_batches import linger_s, split, take


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


@pytest.mark.parametrize("previous_calls, waiting, expected", [
    (1, 1, 0.0),  # a lone client's sends never wait
    (3, 50, 0.0),  # nor a few concurrent clients'
    (4, 1, 0.005),  # under heavy concurrent load the next call waits for more
    (9, 99, 0.005),
    (9, 100, 0.0),  # ... unless what waits fills a call already
    (9, 400, 0.0),
])
def test_a_call_lingers_only_under_heavy_load_and_short_of_a_full_call(previous_calls, waiting, expected):
    assert linger_s(previous_calls, waiting, 100, 0.005, 4) == expected


def test_no_delay_configured_means_no_linger():
    assert linger_s(10, 1, 100, 0.0, 4) == 0.0
