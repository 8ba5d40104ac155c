"""The one clock every server reads time through, so fault tests can shift or jump it."""

import logging
import os
import time
from pathlib import Path

OFFSET_FILE_CHECK_S = 0.1  # how often a clock with an offset file looks at it again


class Clock:
    """Wall time in milliseconds, for timestamps that outlive the process, and monotonic time for
    every timeout and lease.

    `QUORUMQ_CLOCK_OFFSET_MS` in the environment shifts wall time from the start: fault tests start
    a process with a skewed clock without touching the machine's. With `QUORUMQ_CLOCK_DIR`, the
    file named after the process id in that directory, while it exists, holds the offset instead,
    so a fault test can jump one running process's wall clock (and jump it back by removing it).
    """

    def __init__(self, offset_ms: int | None = None) -> None:
        if offset_ms is None:
            offset_ms = int(os.environ.get("QUORUMQ_CLOCK_OFFSET_MS", "0"))
        self.offset_ms = self._start_offset_ms = offset_ms
        directory = os.environ.get("QUORUMQ_CLOCK_DIR")
        self._offset_file = Path(directory) / str(os.getpid()) if directory else None
        self._next_check_s = 0.0

    def now_ms(self) -> int:
        if self._offset_file is not None:
            self._check_offset_file()
        return time.time_ns() // 1_000_000 + self.offset_ms

    def _check_offset_file(self) -> None:
        now_s = time.monotonic()
        if now_s < self._next_check_s:
            return
        self._next_check_s = now_s + OFFSET_FILE_CHECK_S
        try:
            self.offset_ms = int(self._offset_file.read_text())
        except FileNotFoundError:
            self.offset_ms = self._start_offset_ms
        except ValueError:  # a file being written: the next look reads it whole
            pass

    def monotonic(self) -> float:
        return time.monotonic()

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ClockLogFormatter(logging.Formatter):
    """Stamps each log line with the clock's wall time as it is written (a stream handler writes it
    as it is made), so a process whose clock is shifted or jumped logs the time it lives in, as a
    machine whose clock jumped would, and a fault test can see that the process took the jump."""

    def __init__(self, fmt: str, clock: Clock) -> None:
        super().__init__(fmt)
        self.clock = clock

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        now_ms = self.clock.now_ms()
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now_ms // 1000)) + f",{now_ms % 1000:03d}"
