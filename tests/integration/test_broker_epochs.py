"""Scenario 30 of the HA spec: a controller-mode broker changes role only for an epoch no older
than the last one its log holds, and that floor survives a restart (the epoch file, not the
process's memory); what a role change does to work in flight (a SyncStateSet proposal, a
consumer commit waiting for the members); and when a slave may join as far as metadata goes
(core/sync_state.py decision 5). Runs the broker object on a real store, as the controller link
drives it. The master epoch a send is answered with after its master was deposed is checked as a
user sees it, in tests/chaos/test_controller_links.py."""

import asyncio

import pytest

from harness import async_check_for, free_base_port
from quorumq.broker.broker import Broker
from quorumq.clock import Clock
from quorumq.cluster import cluster_pb2 as pb
from quorumq.config import Config, Kind
from quorumq.core.quorum import BrokerRole
from quorumq.core.role import Registered
from quorumq.errors import Error, QuorumqError

OTHER_MASTER = (2, "127.0.0.1:1")  # a master that is never reached: only the role change is looked at


@pytest.fixture
async def open_broker(tmp_path):
    """A function that opens a controller-mode broker on the same store each time, closing the
    one before; the last is closed at teardown."""
    port = free_base_port(span=2)
    values = {"storePathRootDir": str(tmp_path), "mappedFileSizeCommitLog": str(1 << 24),
              "enableControllerMode": "true", "controllerAddr": "127.0.0.1:2",
              "listenPort": str(port), "haListenPort": str(port + 1), "allAckInSyncStateSet": "true",
              "slaveTimeout": "300"}
    opened: list[Broker] = []

    async def open_one() -> Broker:
        if opened:
            await opened[-1].close()
        broker = Broker(Config(Kind.BROKER, values), Clock())
        broker.open()
        assert broker.change_role(Registered(1))
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


async def test_a_proposal_answered_after_the_broker_was_deposed_changes_nothing(open_broker):
    """Found by the chaos suite (F4, C10): the master proposed a smaller SyncStateSet, was deposed
    while the controller's answer was on its way, then dropped the proposal."""
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1, 2}), 1)
    broker.propose_sync_state_set(frozenset({1}))
    assert await broker.become_slave(4, *OTHER_MASTER)
    broker.drop_sync_state_proposal()
    assert broker.role is BrokerRole.SLAVE and broker.sync_state is None


async def test_a_commit_is_answered_once_every_member_has_applied_it(open_broker):
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1, 2}), 1)
    with pytest.raises(QuorumqError) as raised:
        await broker.commit_offset("g", "T", 0, 5)  # member 2 never asks for the metadata
    assert raised.value.error is Error.SLAVE_PERSISTENCE_TIMEOUT and "[2]" in raised.value.detail

    commit = asyncio.create_task(broker.commit_offset("g", "T", 0, 7))
    await committed(broker, 7)
    copied = await broker.metadata_for(pb.MetadataRequest(broker_id=2, wait_ms=0))
    assert not commit.done() and (copied.offsets[0].offset, copied.version) == (7, 3)  # 1: the election
    await broker.metadata_for(pb.MetadataRequest(broker_id=2, incarnation=copied.incarnation,
                                                 applied_version=copied.version, wait_ms=0))
    await asyncio.wait_for(commit, 1)

    stale = pb.MetadataRequest(broker_id=2, incarnation="another process", applied_version=99, wait_ms=0)
    await broker.metadata_for(stale)  # a version of another master process confirms nothing
    with pytest.raises(QuorumqError):
        await broker.commit_offset("g", "T", 0, 8)


async def test_a_commit_waiting_for_the_members_fails_when_the_master_is_deposed(open_broker):
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1, 2}), 1)
    commit = asyncio.create_task(broker.commit_offset("g", "T", 0, 5))
    await committed(broker, 5)
    assert await broker.become_slave(4, *OTHER_MASTER)
    with pytest.raises(QuorumqError) as raised:
        await asyncio.wait_for(commit, 1)
    assert raised.value.error is Error.SERVICE_NOT_AVAILABLE


async def committed(broker: Broker, offset: int) -> None:
    """Until a commit task has taken `offset` and waits for the members."""
    await async_check_for(1, 0.005, lambda: broker.consumers.committed("g", "T", 0) == offset, "the commit taken")


async def confirm(broker: Broker, slave_id: int) -> pb.BrokerMetadata:
    """A slave's two polls: it takes the master's metadata, then says it has applied it."""
    copied = await broker.metadata_for(pb.MetadataRequest(broker_id=slave_id, wait_ms=0))
    await broker.metadata_for(pb.MetadataRequest(broker_id=slave_id, incarnation=copied.incarnation,
                                                 applied_version=copied.version, wait_ms=0))
    return copied


async def test_a_new_master_takes_no_slave_as_joined_before_it_applied_this_term_s_metadata(open_broker):
    """A new master holds the commits of the terms before it; a slave that was out of the set has
    applied none of this term's metadata, however few changes this process made itself."""
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1}), 1)
    assert not broker.metadata_joined(2)
    await confirm(broker, 2)
    assert broker.metadata_joined(2)

    assert await broker.become_slave(4, *OTHER_MASTER)
    assert await broker.become_master(5, frozenset({1}), 1)
    assert not broker.metadata_joined(2), "what it applied in an earlier term says nothing of this one"


async def test_commits_wait_for_a_joining_slave_until_its_join_lapses(open_broker):
    """The set is the master alone; slave 2 is caught up on the log and begins to join. A commit
    then waits for it; once it has applied that commit it may join. A slave that never applies
    holds a commit up for half of slaveTimeout (150 ms here) at most, and the commit is answered."""
    broker = await open_broker()
    assert await broker.become_master(3, frozenset({1}), 1)
    assert not broker.metadata_joined(2)
    commit = asyncio.create_task(broker.commit_offset("g", "T", 0, 5))
    await committed(broker, 5)
    assert not commit.done(), "a commit made while slave 2 joins waits for it"
    copied = await confirm(broker, 2)
    await asyncio.wait_for(commit, 1)
    assert copied.offsets[0].offset == 5 and broker.metadata_joined(2)

    assert not broker.metadata_joined(3)
    commit = asyncio.create_task(broker.commit_offset("g", "T", 0, 6))
    await committed(broker, 6)
    assert not commit.done(), "a commit made while slave 3 joins waits for it"
    await asyncio.wait_for(commit, 1)
    assert not broker.metadata_joined(3), "its join lapsed: commits were answered without it"
