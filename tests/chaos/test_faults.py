"""The chaos smoke suite: each fault kind of the nemesis once, a short run on real processes with
the durable settings, judged by every checker. `make chaos` runs the long ones (tests/chaos/run.py).

A failure shows the verdict table and the seed that replays the run's fault schedule."""

import pytest

from nemesis import FAULT_KINDS
from run import run

SMOKE_SECONDS = 20.0
SMOKE_SEED = 5000  # fixed, so CI replays the same schedules; make chaos draws fresh seeds


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", FAULT_KINDS)
def test_no_acknowledged_send_is_lost_under(fault, tmp_path):
    seed = SMOKE_SEED + FAULT_KINDS.index(fault)
    result = run(fault, seed, SMOKE_SECONDS, tmp_path / fault)
    assert result.rows["faults"] >= 1, f"no fault was injected in {SMOKE_SECONDS} s"
    assert result.ok, f"{result.table}\nreplay: python tests/chaos/run.py --faults {fault} --seed {seed} --count 1"
