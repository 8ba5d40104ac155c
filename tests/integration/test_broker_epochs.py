"""Scenario 30 of the HA spec: a controller-mode broker changes role only for an epoch no older
than the last one its log holds, and that floor survives a restart (the epoch file, not the
process's memory). Runs the broker object on a real store, as the controller link drives it."""

import pytest

from harness import free_base_port
from quorumq.broker.broker import Broker
from quorumq.clock import Clock
from quorumq.config import Config, Kind
from quorumq.core.quorum import BrokerRole

OTHER_MASTER = (2, "127.0.0.1:1")  # a master that is never reached: only the role change is looked at


@pytest.fixture
async def open_broker(tmp_path):
    """A function that opens a controller-mode broker on the same store each time, closing the
    one before; the last is closed at teardown."""
    port = free_base_port(span=2)
    values = {"storePathRootDir": str(tmp_path), "mappedFileSizeCommitLog": str(1 << 24),
              "enableControllerMode": "true", "controllerAddr": "127.0.0.1:2",
              "listenPort": str(port), "haListenPort": str(port + 1)}
    opened: list[Broker] = []

    async def open_one() -> Broker:
        if opened:
            await opened[-1].close()
        broker = Broker(Config(Kind.BROKER, values), Clock())
        broker.open()
        broker.controller_id = 1
        opened.append(broker)
        return broker

    yield open_one
    if opened:
        await opened[-1].close()


async def test_a_restarted_broker_refuses_epochs_older_than_its_log(open_broker):
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1}), 1)
    assert broker.role is BrokerRole.SYNC_MASTER and broker.epochs.last_epoch == 3

    broker = await open_broker()
    assert broker.master_epoch == 0 and broker.epochs.last_epoch == 3, "the floor lives in the epoch file"
    assert not await broker.become_master(2, frozenset({1}), 1)
    assert not await broker.become_slave(2, *OTHER_MASTER)
    assert broker.role is BrokerRole.SLAVE and broker.master_epoch == 0 and broker.epochs.last_epoch == 3

    assert await broker.become_slave(3, *OTHER_MASTER), "the epoch its log ends with is still followed"
    assert broker.master_epoch == 3


async def test_a_restarted_master_takes_its_own_last_epoch_again(open_broker):
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1}), 1)
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1}), 1)
    assert broker.role is BrokerRole.SYNC_MASTER and [entry.epoch for entry in broker.epochs.entries] == [3]
