"""The one clock every server reads wall time through, so fault tests can shift it."""

import os
import time


class Clock:
    """Wall time in milliseconds plus a monotonic time for timeouts.

    `QUORUMQ_CLOCK_OFFSET_MS` in the environment shifts wall time: fault tests start a process with
    a skewed clock without touching the machine's.
    """

    def __init__(self, offset_ms: int | None = None) -> None:
        if offset_ms is None:
            offset_ms = int(os.environ.get("QUORUMQ_CLOCK_OFFSET_MS", "0"))
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()
