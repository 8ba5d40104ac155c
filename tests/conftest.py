"""Fixtures shared by every suite; the helpers behind them live in harness.py."""

import subprocess
from pathlib import Path

import pytest

import quorumq  # noqa: F401 - before harness imports grpc: it turns grpcio's fork support off (LocalCluster's preexec_fn)
from controller_group import started_group
from harness import ACCESS, SMALL_MESSAGE_SIZE, LocalCluster, configuration, started_producer, wait_registered
from quorumq.client import AdminClient, Blocking


def pytest_report_header(config) -> str:
    return f"the official clients' access (QUORUMQ_ACCESS): {ACCESS}"


@pytest.fixture
def start_cluster(tmp_path):
    """A function that starts `quorumq up` with LocalCluster's options and returns its cluster.json.

    Every cluster started through it is stopped at teardown, whether the test passed or not.
    """
    started: list[LocalCluster] = []

    def start(**options) -> dict:
        cluster = LocalCluster(tmp_path / f"cluster-{len(started)}", **options)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture
def cluster(start_cluster) -> dict:
    """A fresh one-broker cluster for this test: the parsed DIR/cluster.json."""
    return start_cluster()


@pytest.fixture(scope="module")
def small_message_cluster(tmp_path_factory) -> dict:
    """A one-broker cluster whose maxMessageSize is SMALL_MESSAGE_SIZE, for tests of that limit."""
    cluster = LocalCluster(tmp_path_factory.mktemp("small-message-cluster"),
                           sets={"maxMessageSize": str(SMALL_MESSAGE_SIZE)})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory) -> dict:
    """One one-broker cluster for a whole test module, for tests that do not stop or reconfigure it."""
    cluster = LocalCluster(tmp_path_factory.mktemp("shared-cluster"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def admin(shared_cluster):
    """quorumq's admin client on the module's shared cluster."""
    with Blocking(AdminClient, shared_cluster["access_point"]) as client:
        yield client


@pytest.fixture(scope="module")
def masters(shared_cluster, admin) -> list[str]:
    """The shared cluster's masters' addresses, once every broker is registered and answers."""
    wait_registered(shared_cluster)
    return [broker.address for broker in admin.brokers(masters_only=True)]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> list[dict]:
    """Two one-broker clusters for a module, started with `quorumq up --cluster A` and `--cluster B`."""
    started = [LocalCluster(tmp_path_factory.mktemp(f"cluster-{name}"), cluster=name) for name in ("A", "B")]
    try:
        yield [cluster.start() for cluster in started]
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture(scope="module")
def controller_group(tmp_path_factory):
    """One controller-mode group of three brokers and one controller (controller_group.py) for a
    whole test module; a test that needs every broker up and in the SyncStateSet restores it first."""
    with started_group(tmp_path_factory.mktemp("controller-group"), controllers=1) as group:
        yield group


@pytest.fixture
def small_disk(tmp_path):
    """A function that mounts a tmpfs of a given size (e.g. "24m") under tmp_path and returns its
    path: a disk that fills. Unmounted at teardown; the test is skipped where mounting is not
    allowed (it needs root)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        mount_point = tmp_path / f"disk-{len(mounted)}"
        mount_point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        mounted.append(mount_point)
        return mount_point

    yield mount
    for mount_point in mounted:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def client_config(shared_cluster):
    """The official Python client's configuration for the module's shared cluster."""
    return configuration(shared_cluster)


@pytest.fixture
def producer(client_config):
    """A started official Python Producer on the module's shared cluster, shut down after the test."""
    producer = started_producer(client_config)
    yield producer
    producer.shutdown()
