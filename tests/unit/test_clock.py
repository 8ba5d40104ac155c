"""The injected clock: an offset file named after the process jumps its wall time while it runs;
monotonic time never moves with it."""

import logging
import os
import time
from datetime import datetime

from quorumq.clock import OFFSET_FILE_CHECK_S, Clock, ClockLogFormatter

JUMP_MS = 3_600_000


def test_an_offset_file_jumps_wall_time_and_its_removal_jumps_back(tmp_path, monkeypatch):
    monkeypatch.setenv("QUORUMQ_CLOCK_DIR", str(tmp_path))
    monkeypatch.setenv("QUORUMQ_CLOCK_OFFSET_MS", "5000")
    clock = Clock()
    offset_file = tmp_path / str(os.getpid())

    def skew_ms() -> int:
        # Past the check interval, so now_ms reads the file again: a poll could not tell a file
        # the clock ignored (the half-written one below) from one it has not read yet.
        time.sleep(2 * OFFSET_FILE_CHECK_S)
        return clock.now_ms() - time.time_ns() // 1_000_000

    assert 4_900 <= skew_ms() <= 5_000
    offset_file.write_text(str(-JUMP_MS))
    monotonic_before = clock.monotonic_ms()
    assert -JUMP_MS - 100 <= skew_ms() <= -JUMP_MS
    assert 0 <= clock.monotonic_ms() - monotonic_before < 60_000
    offset_file.write_text("")  # half written: the offset read before stays
    assert -JUMP_MS - 100 <= skew_ms() <= -JUMP_MS
    offset_file.unlink()
    assert 4_900 <= skew_ms() <= 5_000



def test_log_lines_carry_the_clocks_wall_time():
    formatter = ClockLogFormatter("%(asctime)s %(message)s", Clock(offset_ms=JUMP_MS))
    line = formatter.format(logging.makeLogRecord({"msg": "jumped"}))
    stamped_ms = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000
    assert abs(stamped_ms - time.time_ns() // 1_000_000 - JUMP_MS) < 1000
    assert line.endswith(" jumped")
