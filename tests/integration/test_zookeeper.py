"""LocalZooKeeper against a real server (Debian's zookeeper package), and the ZooKeeper behaviour the
controllers rely on: conditional writes fence a stale writer, and a dead client's ephemeral node
goes once its short session runs out."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError
from kazoo.handlers.threading import KazooTimeoutError

from harness import check_for, free_base_port, process_state
from quorumq.controller.zookeeper import LocalZooKeeper, min_session_timeout_ms

pytestmark = pytest.mark.timeout(60)

# The child process: opens a session as short as the server grants, creates an ephemeral node, reports
# the negotiated timeout (kazoo only logs it) and sleeps until it is killed.
EPHEMERAL_OWNER = textwrap.dedent("""
    import logging, re, sys, time
    from kazoo.client import KazooClient

    negotiated = []

    class Negotiated(logging.Handler):
        def emit(self, record):
            found = re.search(r"negotiated session timeout: (\\d+)", record.getMessage())
            if found:
                negotiated.append(int(found.group(1)))

    logger = logging.getLogger("kazoo.client")
    logger.setLevel(5)  # kazoo's BLATHER, where it logs the negotiated timeout
    logger.addHandler(Negotiated())
    client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
    client.start(timeout=10)
    client.create(sys.argv[2], b"owner", ephemeral=True, makepath=True)
    print(negotiated[-1], flush=True)
    time.sleep(600)
""")


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"), free_base_port(span=1))
    server.start()
    try:
        server.wait_ready(timeout_s=30)
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(zookeeper):
    client = KazooClient(hosts=zookeeper.address, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_a_write_at_a_stale_version_is_refused(zookeeper, client):
    client.create("/fencing/set", b"epoch-1", makepath=True)
    _, read = client.get("/fencing/set")
    # Another writer moves the node on after we read it.
    client.set("/fencing/set", b"epoch-2", version=read.version)
    with pytest.raises(BadVersionError):
        client.set("/fencing/set", b"stale", version=read.version)
    with pytest.raises(BadVersionError):
        client.delete("/fencing/set", version=read.version)
    # The same holds inside a transaction: a stale check fails the whole of it.
    transaction = client.transaction()
    transaction.check("/fencing/set", read.version)
    transaction.set_data("/fencing/set", b"stale")
    results = transaction.commit()
    assert isinstance(results[0], BadVersionError)
    assert client.get("/fencing/set")[0] == b"epoch-2"


def test_an_ephemeral_node_goes_with_its_killed_client(zookeeper, client):
    owner = subprocess.Popen(
        [sys.executable, "-c", EPHEMERAL_OWNER, zookeeper.address, "/members/owner", "0.5"],
        stdout=subprocess.PIPE, text=True)
    try:
        negotiated_ms = int(owner.stdout.readline())
        # Asked for 0.5 s, granted the server's minimum: two ticks.
        assert negotiated_ms == min_session_timeout_ms(zookeeper.tick_time_ms) == 1000
        assert client.exists("/members/owner") is not None
        owner.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        owner.wait()
        check_for(10, 0.01, lambda: client.exists("/members/owner") is None, "ephemeral node gone")
        gone_after = time.monotonic() - killed
    finally:
        owner.kill()
        owner.wait()
    print(f"ephemeral node gone {gone_after:.2f} s after SIGKILL (session timeout {negotiated_ms} ms)")
    # At most a session timeout after the last ping, plus a tick for the expiry check, plus slack.
    assert gone_after < (negotiated_ms + zookeeper.tick_time_ms) / 1000 + 1.0


def test_a_paused_server_answers_nothing_until_resumed(zookeeper, client):
    client.ensure_path("/paused")
    zookeeper.pause()
    try:
        assert process_state(zookeeper.pid) == "T"
        pending = client.get_async("/paused")
        with pytest.raises(KazooTimeoutError):
            pending.get(timeout=1.0)
    finally:
        zookeeper.resume()
    assert process_state(zookeeper.pid) in ("R", "S")
    # A 5 s session outlives a 1 s pause: the request goes through once kazoo reconnects.
    assert pending.get(timeout=10)[0] == b""
    assert client.exists("/paused") is not None


def test_stop_leaves_no_process_even_when_paused(tmp_path):
    server = LocalZooKeeper(tmp_path / "zookeeper", free_base_port(span=1))
    assert server.stop() is None  # never started
    server.start()
    try:
        server.wait_ready(timeout_s=30)
        pid = server.pid
        assert server.command()[-1] == str(server.config_path)
        assert server.log_path.stat().st_size > 0  # log4j writes to the file
        server.pause()
        started = time.monotonic()
        code = server.stop(grace_s=10)
        # SIGTERM (delivered on SIGCONT) ended it well within the grace: the JVM exits 128 + 15.
        assert code == 143
        assert time.monotonic() - started < 5
    finally:
        server.stop()
    assert server.pid is None and not server.running()
    assert process_state(pid) is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert server.stop() is None  # idempotent
