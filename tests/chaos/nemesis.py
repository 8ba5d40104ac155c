"""The nemesis: faults of the reliability spec's B5 matrix injected into a controller-mode broker
group on real processes, on a schedule drawn from a seed, each written to the history.

Each fault is a function `(group, network, rng) -> (target, heal)` that injects at once and returns
what it hit and what heals it; the schedule holds a fault for a drawn time, heals it, and rests
before the next one. F13 adds, half of the time, a second fault while the first is held."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from controller_group import Group
from harness import pid_alive, start_process
from history import History
from network import DOWN, UP, Network
from quorumq.store.checkpoint import load_checkpoint
from quorumq.store.message_store import FSYNC_LOG_NAME

Heal = Callable[[], None]
BALLAST_CHUNK = b"\0" * (1 << 20)
CLOCK_DIR_VARIABLE = "QUORUMQ_CLOCK_DIR"  # where each process's Clock looks for its offset (F12)
CLOCK_JUMP_MS = 3_600_000
CLOCK_DRIFT_MS_PER_S = 100
CLOCK_DRIFT_STEP_S = 0.1
DEATH_TIMEOUT_S = 60.0  # a process in uninterruptible sleep dies once its I/O returns


def _signal(process: dict, sig: int) -> None:
    if pid_alive(process["pid"]):
        os.kill(process["pid"], sig)


def _dead(process: dict) -> None:
    """SIGKILL the process and wait until it is gone, so its files can be changed."""
    _signal(process, signal.SIGKILL)
    deadline = time.monotonic() + DEATH_TIMEOUT_S
    while pid_alive(process["pid"]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"pid {process['pid']} outlived SIGKILL by {DEATH_TIMEOUT_S} s")
        time.sleep(0.01)


def _killed(process: dict) -> Heal:
    # Waited for: a process in uninterruptible sleep (a slow fsync) outlives SIGKILL for a while,
    # holding its store's lock, and a restart meanwhile would fail.
    _dead(process)
    return lambda: start_process(process)


def paused(process: dict) -> Heal:
    """SIGSTOP; the heal sends SIGCONT."""
    _signal(process, signal.SIGSTOP)
    return lambda: _signal(process, signal.SIGCONT)


def kill_master(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F1: SIGKILL the master; it is started again at heal and rejoins as a slave."""
    master = group.master()
    return master["address"], _killed(master)


def kill_slave(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F2: SIGKILL a slave; started again at heal."""
    slave = rng.choice(group.slaves())
    return slave["address"], _killed(slave)


def pause_slave(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F3: a slave's "feigned death": SIGSTOP, SIGCONT at heal."""
    slave = rng.choice(group.slaves())
    return slave["address"], paused(slave)


def pause_master(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F4: SIGSTOP the master; once continued it must find itself deposed and ack nothing."""
    master = group.master()
    return master["address"], paused(master)


def controller_fault(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F5: SIGKILL or SIGSTOP the controller leader, or SIGSTOP ZooKeeper (the consensus)."""
    choice = rng.choice(["kill-leader", "pause-leader", "pause-zookeeper"])
    if choice == "pause-zookeeper":
        return choice, paused(group.zookeeper)
    leader_address = group.leader()
    leader = next(c for c in group.controllers if c["address"] == leader_address)
    heal = _killed(leader) if choice == "kill-leader" else paused(leader)
    return f"{choice} {leader_address}", heal


def zookeeper_node(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F15: SIGKILL or SIGSTOP one node of the three-node ZooKeeper ensemble; the other two keep a
    quorum, so writes and elections go on. Killed, it is started again at heal."""
    node = rng.choice(group.zookeepers)
    if rng.random() < 0.5:
        return f"kill {node['address']}", _killed(node)
    return f"pause {node['address']}", paused(node)


def zookeeper_quorum(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F16: SIGKILL or SIGSTOP two of the ensemble's three nodes: without a quorum no election can
    happen, and the data path must keep serving. Killed nodes are started again at heal."""
    nodes = rng.sample(group.zookeepers, 2)
    kill = rng.random() < 0.5
    heals = [_killed(node) if kill else paused(node) for node in nodes]

    def heal() -> None:
        for each in heals:
            each()
    return f"{'kill' if kill else 'pause'} {' '.join(node['address'] for node in nodes)}", heal


def disk_full(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F8: fill the master's or a slave's store (each on its own small tmpfs) until ENOSPC."""
    broker = group.master() if rng.random() < 0.5 else rng.choice(group.slaves())
    ballast = Path(broker["data_dir"]) / "ballast"
    with open(ballast, "wb", buffering=0) as out:
        try:
            while True:
                out.write(BALLAST_CHUNK)
        except OSError:
            pass  # ENOSPC: full
    return broker["address"], lambda: ballast.unlink(missing_ok=True)


def torn_tail(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F9: SIGKILL a broker, then overwrite the end of its commit log with garbage from a random
    byte inside its last records; the restart must cut there and fetch the rest again."""
    broker = rng.choice(group.brokers)
    _dead(broker)
    segments = sorted((Path(broker["data_dir"]) / "commitlog").glob("[0-9]*"))
    if segments:
        last = segments[-1]
        end = _written_length(last)
        start = max(0, end - rng.randint(1, 4096))
        with open(last, "r+b") as segment:
            segment.seek(start)
            segment.write(rng.randbytes(end - start + rng.randint(0, 512)))
            os.fsync(segment.fileno())
    return broker["address"], lambda: start_process(broker)


def corrupt_at_rest(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F10: SIGKILL a broker and flip 1 to 8 bits in its commit log (a record below its last
    checkpoint: a sealed segment when there is one), a consume-queue file or its epoch file;
    restarted at heal. It must find the damage, repair it from its peers and, until then, never
    be elected while a sound broker is alive."""
    broker = rng.choice(group.brokers)
    _dead(broker)
    store = Path(broker["data_dir"])
    kind = rng.choice(["commitlog", "consumequeue", "epoch"])
    if kind == "commitlog":
        segments = sorted((store / "commitlog").glob("[0-9]*"))
        path = segments[-2] if len(segments) > 1 else segments[-1]
        vouched = load_checkpoint(store / "checkpoint").flushed_offset - int(path.name)
        end = min(_written_length(path), vouched)
    elif kind == "consumequeue":
        path = rng.choice(sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file()))
        end = path.stat().st_size
    else:
        path = store / "epochFileCheckpoint"
        end = path.stat().st_size
    if end > 0:
        with open(path, "r+b") as data:
            for _ in range(rng.randint(1, 8)):
                position, bit = rng.randrange(end), rng.randrange(8)
                data.seek(position)
                flipped = bytes([data.read(1)[0] ^ (1 << bit)])
                data.seek(position)
                data.write(flipped)
            os.fsync(data.fileno())
    return f"{path.relative_to(store)} {broker['address']}", lambda: start_process(broker)


def partition(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F6: cut the master off from its slaves, from the controllers or from both (clients still
    reach it), or a slave from the controllers. A master cut off from both must ack nothing."""
    master = group.master()["address"]
    kind = rng.choice(["master-slaves", "master-controllers", "master-all", "slave-controllers"])
    if kind == "slave-controllers":
        target = rng.choice(group.slaves())["address"]
        links = network.links_of(target, "controllers")
    else:
        target = master
        towards = ["slaves", "controllers"] if kind == "master-all" else [kind.split("-")[1]]
        links = [link for way in towards for link in network.links_of(master, way)]
    network.impair(links)
    return f"{kind} {target}", network.heal


def impair_link(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F7: one direction of the master's replication or controller links dropped, a broker's link
    slowed by 10-500 ms per read, or 1-10% of the chunks on the master's replication link given a
    flipped byte. Only replication links are corrupted: its frames carry a CRC, while gRPC in
    clear text relies on TCP's checksum, which a proxy rewriting bytes bypasses (TLS is the
    answer there)."""
    kind = rng.choice(["one-way", "slow", "corrupt"])
    towards = "slaves" if kind == "corrupt" else rng.choice(["slaves", "controllers"])
    if kind == "one-way":
        broker = group.master()["address"]
        direction = rng.choice([UP, DOWN])
        network.impair(network.links_of(broker, towards), frozenset({direction}))
        what = f"one-way ({direction} blocked)"
    elif kind == "slow":
        broker = (group.master() if towards == "slaves" else rng.choice(group.brokers))["address"]
        delay_s = rng.uniform(0.01, 0.5)
        network.impair(network.links_of(broker, towards), frozenset(), delay_s)
        what = f"slow ({delay_s * 1000:.0f} ms)"
    else:
        broker = group.master()["address"]
        rate = rng.uniform(0.01, 0.1)
        network.impair(network.links_of(broker, towards), frozenset(), corrupt_rate=rate, seed=rng.randrange(1 << 31))
        what = f"corrupt ({rate:.0%} of chunks)"
    return f"{what} {broker} -> {towards}", network.heal


def clock_jump(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F12: jump a broker's wall clock an hour forward or back while it runs, or make it drift
    100 ms a second either way (its Clock reads the offset from QUORUMQ_CLOCK_DIR/<pid>); heal
    sets it right. Controllers and the name server time everything on monotonic clocks, so
    brokers are where wall time lives (store timestamps)."""
    broker = rng.choice(group.brokers)
    sign = rng.choice([-1, 1])
    offset_file = Path(os.environ[CLOCK_DIR_VARIABLE]) / str(broker["pid"])
    if rng.random() < 0.5:
        _write_offset(offset_file, sign * CLOCK_JUMP_MS)
        return f"{sign * CLOCK_JUMP_MS:+d} ms {broker['address']}", lambda: offset_file.unlink(missing_ok=True)
    stop = threading.Event()

    def drift() -> None:
        started = time.monotonic()
        while not stop.wait(CLOCK_DRIFT_STEP_S):
            _write_offset(offset_file, round(sign * CLOCK_DRIFT_MS_PER_S * (time.monotonic() - started)))

    drifter = threading.Thread(target=drift, name="clock-drift", daemon=True)
    drifter.start()

    def heal() -> None:
        stop.set()
        drifter.join()
        offset_file.unlink(missing_ok=True)

    return f"drift {sign * CLOCK_DRIFT_MS_PER_S:+d} ms/s {broker['address']}", heal


def _write_offset(offset_file: Path, offset_ms: int) -> None:
    staged = offset_file.with_suffix(".tmp")
    staged.write_text(str(offset_ms))
    os.replace(staged, offset_file)


def power_loss(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F11: a power cut of one broker, or of all three at once (one time in four): SIGKILL, then
    every commit-log byte past what the store had fsynced (it records that offset under
    QUORUMQ_FSYNC_LOG) is lost, as the page cache is. Restarted at heal. The checkpoint and epoch
    files are written whole and fsynced, and consume queues are rebuilt from the log past the
    checkpoint, so the commit log is what a power cut takes."""
    brokers = list(group.brokers) if rng.random() < 0.25 else [rng.choice(group.brokers)]
    for broker in brokers:
        _dead(broker)
    for broker in brokers:
        _lose_unsynced(Path(broker["data_dir"]))
    return " ".join(broker["address"] for broker in brokers), lambda: [start_process(b) for b in brokers]


def _lose_unsynced(store: Path) -> None:
    """Zero every commit-log byte at or past the fsynced offset: the preallocated segments are on
    disk, their unsynced contents are not."""
    fsynced = int((store / FSYNC_LOG_NAME).read_bytes() or b"0")
    for segment in sorted((store / "commitlog").glob("[0-9]*")):
        start = max(fsynced - int(segment.name), 0)
        length = _written_length(segment)
        if start < length:
            with open(segment, "r+b") as data:
                data.seek(start)
                data.write(bytes(length - start))
                os.fsync(data.fileno())


def _written_length(segment: Path) -> int:
    """Where the zero fill of a preallocated segment begins (its written length)."""
    data = segment.read_bytes()
    return len(data.rstrip(b"\0"))


def kill_proxy(group: Group, network: Network, rng: random.Random) -> tuple[str, Heal]:
    """F17: SIGKILL one of the proxies sharing the official clients' port (SO_REUSEPORT);
    started again at heal. Calls on its connections fail, and the clients' next connections
    reach the other one: a proxy keeps no state."""
    proxy = rng.choice(group.proxies)
    return f"{Path(proxy['log']).parent.name} {proxy['address']}", _killed(proxy)


Fault = Callable[[Group, Network, random.Random], tuple[str, Heal]]
FAULTS: dict[str, Fault] = {
    "F1": kill_master, "F2": kill_slave, "F3": pause_slave, "F4": pause_master, "F5": controller_fault,
    "F6": partition, "F7": impair_link, "F8": disk_full, "F9": torn_tail, "F10": corrupt_at_rest,
    "F11": power_loss, "F12": clock_jump, "F15": zookeeper_node, "F16": zookeeper_quorum,
}
# How long a fault is held, and the rest after it, in seconds (drawn uniformly).
HOLD_S = {"F1": (5, 15), "F2": (5, 15), "F3": (3, 12), "F4": (5, 15), "F5": (3, 10), "F6": (5, 20),
          "F7": (5, 15), "F8": (10, 20), "F9": (1, 3), "F10": (1, 10), "F11": (5, 15), "F12": (10, 60),
          "F15": (5, 20), "F16": (5, 15)}
REST_S = (8, 15)
# F13, combined chaos: each time a kind drawn from all of the above, after a shorter rest; half of
# the time a second fault of another kind joins it for the rest of its hold. Second faults hit the
# network, the controllers or a clock, never a broker's process or store, so the two heals never
# restart one process twice; and never the network when the first did (a link holds one setting:
# the second would replace the first).
COMBINED = "F13"
COMBINED_REST_S = (5, 10)
OVERLAP_CHANCE = 0.5
OVERLAPPING = ("F5", "F6", "F7", "F12")
NETWORK_FAULTS = ("F6", "F7")
# F14, pipeline faults: the replicator and its standby (pipeline.py), drawn by a run that has them.
PIPELINE = "F14"
HOLD_S[PIPELINE] = (10, 30)
# F17, a proxy killed: only the proxy profile's runs have proxies, so F13 does not draw it.
PROXY_KILL = "F17"
HOLD_S[PROXY_KILL] = (3, 10)
KINDS: dict[str, Fault] = {**FAULTS, PROXY_KILL: kill_proxy}  # what _inject may inject, F14's aside
FAULT_KINDS = [*FAULTS, COMBINED, PIPELINE, PROXY_KILL]
# The faults that need a ZooKeeper ensemble of three (F13 draws from every kind above).
ENSEMBLE_FAULTS = ("F13", "F15", "F16")


class Nemesis:
    """Runs one fault kind on its schedule in a thread until stopped; `heal_all` ends any fault."""

    def __init__(self, fault: str, group: Group, network: Network, history: History, seed: int,
                 pipeline_fault: Fault | None = None) -> None:
        self.fault, self.group, self.network, self.history = fault, group, network, history
        self.pipeline_fault = pipeline_fault
        self.rng = random.Random(seed)
        self._stop = threading.Event()
        self._heals: list[Heal] = []  # of the faults in progress, in the order they began
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def halt(self) -> None:
        """End the schedule and heal the fault in progress."""
        self._stop.set()
        self._thread.join(120)
        self.heal()

    def stop(self) -> None:
        """Halt, and raise what made the nemesis fail."""
        self.halt()
        if self.error:
            raise RuntimeError(f"the nemesis failed ({self.fault})") from self.error

    def heal(self) -> None:
        """End the faults in progress, the last begun first; every one, even when one fails."""
        with self._lock:
            heals, self._heals = self._heals, []
        failures = []
        for heal in reversed(heals):
            try:
                heal()
            except Exception as error:  # raised once the others are healed
                failures.append(error)
        if heals:
            self.history.invoke("nemesis", "heal", self.fault)
        if failures:
            raise failures[0]

    def _run(self) -> None:
        rest = COMBINED_REST_S if self.fault == COMBINED else REST_S
        try:
            while not self._stop.wait(self.rng.uniform(*rest)):
                self.group.wait_in_sync()  # each fault (or F13's first one) meets a whole group
                if self._stop.is_set():
                    return
                kind = self.rng.choice(list(FAULTS)) if self.fault == COMBINED else self.fault
                self._inject(kind)
                hold_s = self.rng.uniform(*HOLD_S[kind])
                if self.fault == COMBINED and self.rng.random() < OVERLAP_CHANCE:
                    second = self.rng.choice([other for other in OVERLAPPING if other != kind and not (
                        other in NETWORK_FAULTS and kind in NETWORK_FAULTS)])
                    joins_after_s = self.rng.uniform(0, hold_s)
                    if not self._stop.wait(joins_after_s):
                        self._join(second)
                    hold_s -= joins_after_s
                self._stop.wait(hold_s)
                self.heal()
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def _inject(self, kind: str) -> None:
        inject = self.pipeline_fault if kind == PIPELINE else KINDS[kind]
        target, heal = inject(self.group, self.network, self.rng)
        with self._lock:
            self._heals.append(heal)
        self.history.invoke("nemesis", "fault", {"fault": kind, "target": target})

    def _join(self, kind: str) -> None:
        """F13's second fault; skipped when the first left the group without a master to aim at
        (all three brokers power-cut, say)."""
        try:
            self._inject(kind)
        except AssertionError as error:  # from Group.master(): no single master within FAILOVER_S
            self.history.invoke("nemesis", "skip", {"fault": kind, "why": str(error)[:200]})


def mount_small_disks(stores: list[Path], size: str = "64m") -> list[Path]:
    """A tmpfs of `size` on each broker's store directory, made before the brokers start (F8)."""
    mounted = []
    for store in stores:
        store.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(store)], check=True)
        mounted.append(store)
    return mounted


def unmount(mounted: list[Path]) -> None:
    for store in mounted:
        subprocess.run(["umount", "-l", str(store)], check=False)
