"""A broker's links to the controllers and to its master, through the chaos suite's proxies
(network.py).

A broker reaches the controllers only at the addresses it is configured with, so cutting those
cuts it off whichever controller leads. A controller names the leader by its own address; brokers
that followed that name went round the proxies whenever the second controller led, and a master
cut off from the controllers kept its role (found in an F13 run: no election in 9 s of
"master-controllers").

A master whose SyncStateSet change reached the controller but whose answer did not cannot know
which set the controller holds: it keeps the stricter view, the union of the two, until the
controller's replica info says, so no send is acknowledged without a broker the controller may
elect.

A send that auto-creates its topic is acknowledged once the members hold the topic, as an
operator's topic update is: a slave learns topics only from its master's metadata, never from
the log, so an acknowledged message of a topic the elected slave never heard of could not be read.

A send answered after its master was deposed carries the master epoch that stored it, not the one
the broker learnt while the send waited."""

import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager

from controller_group import FAILOVER_S, SEND_OK, SETTLE_S, Group, started_group
from harness import check_for, free_base_port, log_end, log_since, start_process, stop_process
from network import DOWN, Network
from quorumq.client import Blocking, ClientError, Message, Producer
from quorumq.client.controller import CALL_TIMEOUT_S


@contextmanager
def proxied_group(directory, *broker_sets):
    """A controller-mode group of three whose links to the two controllers and to the master's
    HA and metadata ports go through the proxies; `broker_sets` as `quorumq up --broker-set` takes."""
    base_port = free_base_port()
    network = Network(base_port, replicas=3, controllers=2)
    try:
        with started_group(directory, controllers=2, base_port=base_port,
                           broker_sets=network.broker_sets() + list(broker_sets)) as group:
            group.wait_in_sync()
            yield group, network
    finally:
        network.close()


def test_a_master_cut_off_from_its_configured_controller_addresses_is_replaced(tmp_path):
    with proxied_group(tmp_path) as (group, network):
        first, second = group.controllers
        if group.leader() == first["address"]:
            stop_process(first, signal.SIGKILL)  # the second leads from now on
            check_for(SETTLE_S, 0.2, lambda: group.leader() == second["address"], "the second controller leading")
            start_process(first)
        for broker in group.brokers:  # each starts by asking the first, which names the second
            stop_process(broker, signal.SIGKILL)
            start_process(broker)
            group.wait_in_sync()
        master = group.master()
        network.impair(network.links_of(master["address"], "controllers"))
        check_for(FAILOVER_S, 0.2, lambda: any(group.says_master(broker) for broker in group.brokers
                                               if broker is not master), "another broker elected")


def holds_without(master_status: dict[str, str], broker_id: int) -> bool:
    """Whether the master has settled on a SyncStateSet without `broker_id` (no change pending)."""
    members = master_status["syncStateSet"].split(",")
    return str(broker_id) not in members and not master_status["syncStateSetPending"]


TAKE_BACK_TRIES = 3
TAKE_BACK_S = 20.0  # a slave that caught up is proposed within a second or two


def taken_back_unheard(group: Group, network: Network, master: dict, joining: dict, joining_id: int) -> int:
    """Stop `joining` until the master settles on a set without it, make the master's controller
    links hold their answers, and let `joining` go on until the controller takes it back; the
    master's log end from before. The SIGSTOP ends the slave's heartbeat stream (the controller's
    pings go unanswered), and the controller refuses a slave that is not alive: when the master
    proposes it before its stream is back, the refusal is held with the answers and the set stays.
    Then the links heal, the group comes together again, and this tries again."""
    for _ in range(TAKE_BACK_TRIES):
        os.kill(joining["pid"], signal.SIGSTOP)
        try:
            check_for(SETTLE_S, 0.2, lambda: joining_id not in group.replica_info()["sync_state_set"],
                      "the stopped slave out of the SyncStateSet")
            # and the master holding that answer: one still in flight when the links go down
            # leaves the shrink pending, and a master with a change pending proposes no other
            check_for(SETTLE_S, 0.2, lambda: holds_without(group.status(master), joining_id),
                      "the master holding the set without the stopped slave")
            network.impair(network.links_of(master["address"], "controllers"), frozenset({DOWN}))
            logged = log_end(master)
        finally:
            os.kill(joining["pid"], signal.SIGCONT)
        try:
            check_for(TAKE_BACK_S, 0.05, lambda: joining_id in group.replica_info()["sync_state_set"],
                      "the controller taking the slave back")
            return logged
        except AssertionError:
            network.heal()
            group.wait_in_sync()
    raise AssertionError(f"the controller never took the slave back in {TAKE_BACK_TRIES} tries")


def test_a_set_change_whose_answer_was_lost_keeps_every_send_on_the_brokers_the_controller_may_elect(tmp_path):
    """The controller takes slave S back into the set, but the master never hears so (its
    controller links pass requests and hold answers). S then stops. A send the master
    acknowledged now would be missing from S, which the controller elects once the other two
    die: the master must not acknowledge it."""
    with proxied_group(tmp_path) as (group, network):
        topic = group.new_topic()
        assert group.send(topic, b"before") == SEND_OK
        master = group.master()
        joining, other = group.slaves()
        joining_id, other_id = (int(group.status(slave)["brokerId"]) for slave in (joining, other))
        try:
            logged = taken_back_unheard(group, network, master, joining, joining_id)
            os.kill(joining["pid"], signal.SIGSTOP)
            check_for(2 * CALL_TIMEOUT_S + SETTLE_S, 0.1, lambda: "got no answer" in log_since(master, logged),
                      "the master asked both controllers and neither answer came")
            status = group.send(topic, b"after")
            logged = {controller["address"]: log_end(controller) for controller in group.controllers}
            stop_process(other, signal.SIGKILL)
            # Its stream's end reaches the controller first: it is not elected as the master dies.
            check_for(SETTLE_S, 0.05, lambda: any(f"broker {other_id} gone" in log_since(controller, logged[
                controller["address"]]) for controller in group.controllers), "the controller saw the slave go")
            stop_process(master, signal.SIGKILL)
        finally:
            os.kill(joining["pid"], signal.SIGCONT)
            network.heal()
        assert group.master() is joining
        bodies = check_for(SETTLE_S, 0.2, lambda: group.bodies(topic), "the elected slave serving the topic")
        assert b"before" in bodies and (status != SEND_OK or b"after" in bodies)
        assert status == "FLUSH_SLAVE_TIMEOUT", "the master waited for the union of the two sets"


def test_a_send_that_creates_its_topic_is_acknowledged_once_the_members_hold_the_topic(tmp_path):
    """With the slaves' metadata copy blocked, a send to a new topic reaches every member's log but
    the topic only the master's: acknowledged then, both would be lost with the master. The send
    is answered once the link heals; or, blocked past slaveTimeout, refused as an operator's topic
    update would be, and its resend answered from the stored copy. After the master's SIGKILL the
    elected slave serves both topics and each message once."""
    with proxied_group(tmp_path, *(f"{index}:slaveTimeout=4000" for index in range(3))) as (group, network):
        master = group.master()
        slaves = group.slaves()

        def only_the_master_knows_the_topic(end: int) -> bool:
            """The log past `end` on every member, a topic more on the master than on the slaves."""
            status = group.status(master)
            return int(status["commitLogMaxOffset"]) > end and all(
                slave_status["commitLogMaxOffset"] == status["commitLogMaxOffset"]
                and int(slave_status["topicCount"]) < int(status["topicCount"])
                for slave_status in map(group.status, slaves))

        def send(topic: str, message: Message) -> str:
            try:
                return group.producer.send(topic, message, queue_id=0).status
            except ClientError as error:
                return error.name

        healed, refused = (f"T{uuid.uuid4().hex[:10]}" for _ in range(2))  # the sends create them
        network.impair(network.links_of(master["address"], "metadata"))
        end = int(group.status(master)["commitLogMaxOffset"])
        with ThreadPoolExecutor(1) as pool:
            sent = pool.submit(send, healed, Message(b"healed"))
            try:
                check_for(SETTLE_S, 0.05, lambda: only_the_master_knows_the_topic(end), "the send stored")
                assert not sent.done(), f"answered {sent.result()} while no slave holds the topic"
            finally:
                network.heal()
            assert sent.result() == SEND_OK

        network.impair(network.links_of(master["address"], "metadata"))
        end = int(group.status(master)["commitLogMaxOffset"])
        message = Message(b"refused", message_id=uuid.uuid4().hex.upper())
        try:
            assert send(refused, message) == "SLAVE_PERSISTENCE_TIMEOUT"
            assert only_the_master_knows_the_topic(end), "stored, though refused"
        finally:
            network.heal()
        check_for(SETTLE_S, 0.1, lambda: len({group.status(broker)["topicCount"] for broker in group.brokers}) == 1,
                  "the slaves holding the topic")
        assert send(refused, message) == SEND_OK

        stop_process(master, signal.SIGKILL)
        assert group.master() in slaves
        assert check_for(SETTLE_S, 0.2, lambda: group.bodies(healed), "the new master serving") == [b"healed"]
        assert group.bodies(refused) == [b"refused"]


def test_a_send_answered_after_its_master_was_deposed_carries_the_epoch_that_stored_it(tmp_path):
    """The master of epoch E stores a send that waits for its slaves (its replication link holds
    every byte) and is cut off from the controllers, which elect a slave at a newer epoch. Its
    links back, the old master follows the new one and answers the waiting send: for epoch E."""
    with proxied_group(tmp_path, *(f"{index}:slaveTimeout=60000" for index in range(3))) as (group, network):
        topic, master = group.new_topic(), group.master()
        stored_by = group.send_message(topic, b"before").master_epoch
        network.impair(network.links_of(master["address"], "slaves")
                       + network.links_of(master["address"], "controllers"))
        with closing(Blocking(Producer, group.cluster["access_point"], timeout_s=SETTLE_S)) as producer, \
                ThreadPoolExecutor(1) as pool:
            try:
                sent = pool.submit(producer.send, topic, Message(b"waits"), queue_id=0)
                check_for(SETTLE_S, 0.05, lambda: group.status(master)["pendingMessages"] == "1",
                          "the send stored and waiting for the slaves")
                check_for(FAILOVER_S, 0.1, lambda: any(group.says_master(broker) for broker in group.brokers
                                                       if broker is not master), "another broker elected")
            finally:
                network.heal()
            result = sent.result()
        assert group.status(master)["brokerRole"] == "SLAVE"
        assert group.master()["address"] != master["address"]
        assert result.master_epoch == stored_by, result
