"""The injected clock: an offset file named after the process jumps its wall time while it runs;
monotonic time never moves with it."""

import os
import time

from quorumq.clock import OFFSET_FILE_CHECK_S, Clock

JUMP_MS = 3_600_000


def test_an_offset_file_jumps_wall_time_and_its_removal_jumps_back(tmp_path, monkeypatch):
    monkeypatch.setenv("QUORUMQ_CLOCK_DIR", str(tmp_path))
    monkeypatch.setenv("QUORUMQ_CLOCK_OFFSET_MS", "5000")
    clock = Clock()
    offset_file = tmp_path / str(os.getpid())

    def skew_ms() -> int:
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

