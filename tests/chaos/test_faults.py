"""The chaos smoke suite: each fault kind of the nemesis once, a short run on real processes with
the durable settings (F17, a proxy killed, with the proxy profile and W6), judged by every checker;
and one run of the FIFO workload (W6). `make chaos` runs the long ones (tests/chaos/run.py).

A failure shows the verdict table and the seed that replays the run's fault schedule."""

import pytest

from nemesis import FAULT_KINDS, PROXY_KILL
from quorumq.config import Config, Kind, read_properties
from quorumq.core.retention import parse_delete_when, retention_action
from run import PROFILES, PROXY, SECURE, run
from workload import FifoUnsupported

SMOKE_SECONDS = 20.0
SMOKE_SEED = 5000  # fixed, so CI replays the same schedules; make chaos draws fresh seeds
FIFO_SMOKE_SEED = 5100
SECURE_SMOKE_SEED = 5200
PROXY_SMOKE_SEED = 5300
SECURE_SMOKE_SECONDS = 5.0  # the profile reaches every client: the long runs put it under faults


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_full_disk_makes_no_broker_of_a_run_delete_unexpired_segments(profile):
    """F8 fills a store's disk to 100%. With the default diskSpaceCleanForciblyRatio retention then
    deletes the oldest segment, acknowledged sends and all: F13 seed 914025173 (W6) had its final
    master lose 10,100 of them that way, every one still on both slaves, and C1, C8 and C12 failed.
    A full disk must only refuse writes."""
    config = Config(Kind.BROKER, PROFILES[profile])
    action = retention_action(hour=0, delete_hours=parse_delete_when(config["deleteWhen"]), disk_ratio=1.0,
                              max_used_ratio=config["diskMaxUsedSpaceRatio"] / 100,
                              force_ratio=config["diskSpaceCleanForciblyRatio"],
                              warning_ratio=config["diskSpaceWarningLevelRatio"])
    assert not action.force and not action.writable, action


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", [kind for kind in FAULT_KINDS if kind != PROXY_KILL])
def test_no_acknowledged_send_is_lost_under(fault, tmp_path):
    seed = SMOKE_SEED + FAULT_KINDS.index(fault)
    result = run(fault, seed, SMOKE_SECONDS, tmp_path / fault)
    assert result.rows["faults"] >= 1, f"no fault was injected in {SMOKE_SECONDS} s"
    assert result.ok, f"{result.table}\nreplay: python tests/chaos/run.py --faults {fault} --seed {seed} --count 1"


@pytest.mark.timeout(240)
def test_fifo_consumption_keeps_order_and_dead_letters_under_a_master_kill(tmp_path):
    """W6 under F1: C12 (and every other checker) must pass. Skipped, with the cluster's own
    answer as the reason, while it does not serve FIFO topics, subscription groups and dead letters."""
    try:
        result = run("F1", FIFO_SMOKE_SEED, SMOKE_SECONDS, tmp_path / "W6", workload="W6")
    except FifoUnsupported as missing:
        pytest.skip(f"the cluster does not serve FIFO consumption yet: {missing}")
    figures = result.rows["checks"]["C12 FIFO"]
    assert result.rows["faults"] >= 1 and figures["deliveries"] and figures["dead letters"], figures
    replay = f"python tests/chaos/run.py --faults F1 --seed {FIFO_SMOKE_SEED} --count 1 --workload W6"
    assert result.ok, f"{result.table}\nreplay: {replay}"


@pytest.mark.timeout(240)
def test_every_client_of_a_secure_run_signs_its_calls_over_tls(tmp_path):
    """The secure profile: every process of the run serves TLS alone, authenticates and authorizes,
    and every client of the run (the producers, the consumers, W8's user and rule changes, the
    group's admin calls and commands) signs over TLS: no process refused a call or a handshake, and
    every checker passes, C15 on users and rules made. The official clients' (W6, W7) take longer to
    drain: the long runs have them."""
    result = run("F2", SECURE_SMOKE_SEED, SECURE_SMOKE_SECONDS, tmp_path / "secure", profile=SECURE, workload="W8")
    replay = (f"python tests/chaos/run.py --faults F2 --seed {SECURE_SMOKE_SEED} --count 1 --profile {SECURE} "
              "--workload W8")
    assert result.ok and result.rows["acked"], f"{result.table}\nreplay: {replay}"
    assert result.rows["checks"]["C15 users and rules"]["acked create-users"], result.table
    cluster = tmp_path / "secure" / "cluster"
    configs = [read_properties(config.read_text()) for config in cluster.glob("*/*.conf")]
    assert len(configs) == 6  # the name server, two controllers, three brokers
    assert all(config["authenticationEnabled"] == config["authorizationEnabled"] == "true"
               and config["tls.server.mode"] == "enforcing" for config in configs), configs
    refusals = [line for log in cluster.glob("*/*.log") for line in log.read_text(errors="replace").splitlines()
                if "refused: UNAUTHENTICATED" in line or "refused: NO_PERMISSION" in line
                or "Handshake failed" in line]
    assert not refusals, refusals[:5]


@pytest.mark.timeout(240)
def test_official_clients_through_two_proxies_keep_fifo_order_when_one_is_killed(tmp_path):
    """The proxy profile: W6's official clients reach the group through two proxies on one port,
    and F17 kills one of them (restarted at heal). Their calls on its connections fail, the next
    ones reach the other proxy, and every checker passes, C12 and C10 (no proxy exited on its own)
    included."""
    result = run(PROXY_KILL, PROXY_SMOKE_SEED, SMOKE_SECONDS, tmp_path / PROXY, profile=PROXY, workload="W6")
    figures = result.rows["checks"]["C12 FIFO"]
    assert result.rows["faults"] >= 1 and figures["deliveries"], figures
    replay = (f"python tests/chaos/run.py --faults {PROXY_KILL} --seed {PROXY_SMOKE_SEED} --count 1 "
              f"--profile {PROXY} --workload W6")
    assert result.ok, f"{result.table}\nreplay: {replay}"
