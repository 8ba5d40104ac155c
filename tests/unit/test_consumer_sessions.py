"""A broker counts a group's consumers live while their sessions are open and the group heartbeats."""

from test_store_support import ManualClock

from quorumq import limits
from quorumq.broker.consumers import ConsumerGroups
from quorumq.config import Config, Kind
from quorumq.store import MemoryStore


class SteppedClock(ManualClock):
    """Monotonic time that moves only when the test moves it."""

    def __init__(self) -> None:
        super().__init__()
        self.monotonic_now_ms = 0

    def monotonic_ms(self) -> int:
        return self.monotonic_now_ms


def test_a_group_is_live_while_a_session_is_open_and_heard_from(tmp_path):
    clock = SteppedClock()
    groups = ConsumerGroups(MemoryStore(clock=clock), tmp_path, clock, Config(Kind.BROKER, {}), lambda: None)
    assert groups.live_consumers("G") == 0
    groups.heard_from("G")  # a heartbeat alone (no session) is no live consumer
    assert groups.live_consumers("G") == 0
    groups.session_opened("G")
    groups.session_opened("G")
    assert groups.live_consumers("G") == 2
    groups.session_closed("G")
    assert groups.live_consumers("G") == 1

    clock.monotonic_now_ms += limits.CONSUMER_SESSION_EXPIRY_MS
    groups.heard_from("G")
    clock.monotonic_now_ms += limits.CONSUMER_SESSION_EXPIRY_MS
    assert groups.live_consumers("G") == 1, "a heartbeat within the expiry keeps it live"
    clock.monotonic_now_ms += 1
    assert groups.live_consumers("G") == 0, "an open session that stopped heartbeating has timed out"
    groups.heard_from("G")
    assert groups.live_consumers("G") == 1, "and is live again when it heartbeats"
    groups.session_closed("G")
    assert groups.live_consumers("G") == 0
