"""`quorumq admin` commands against a real cluster: text and --json output, exit codes, errors."""

import json
import os
import signal
import uuid

import pytest

from harness import check_for, cli, free_base_port, pid_alive, process_of
from quorumq.client import AdminClient, Blocking, ClientError, Message, Producer, PullConsumer
from quorumq.cluster import cluster_pb2 as pb


def admin(cluster: dict, command: str, *args: str):
    return cli("admin", command, "-n", cluster["access_point"], *args)


def admin_json(cluster: dict, command: str, *args: str):
    result = admin(cluster, command, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def new_topic() -> str:
    return f"T{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def broker(shared_cluster) -> dict:
    return process_of(shared_cluster, "broker")


def test_cluster_list(shared_cluster, broker):
    [listed] = admin_json(shared_cluster, "clusterList")
    assert (listed["cluster"], listed["broker_name"], listed["broker_id"], listed["address"]) == (
        "DefaultCluster", "broker-a", 0, broker["address"])
    assert 0 <= listed["since_heard_ms"] <= 120_000, "heard within brokerNotActiveTimeoutMillis, or dropped"
    text = admin(shared_cluster, "clusterList")
    assert text.returncode == 0 and "broker-a" in text.stdout and broker["address"] in text.stdout


def test_update_topic_then_route_and_list(shared_cluster):
    topic = new_topic()
    updated = admin(shared_cluster, "updateTopic", "-t", topic, "-c", "DefaultCluster", "-r", "4", "-w", "4")
    assert updated.returncode == 0, updated.stderr
    route = admin_json(shared_cluster, "topicRoute", "-t", topic)
    assert route["queues"] == [{"broker_name": "broker-a", "read_queue_nums": 4, "write_queue_nums": 4, "perm": 6,
                                "message_type": "NORMAL"}]
    assert admin_json(shared_cluster, "topicList")[topic] == "NORMAL"
    assert "broker-a" in admin(shared_cluster, "topicRoute", "-t", topic).stdout


def test_a_topics_message_type_is_set_by_attribute_kept_without_one_and_checked(shared_cluster):
    topic = new_topic()
    fifo = admin(shared_cluster, "updateTopic", "-t", topic, "-c", "DefaultCluster", "-a", "+message.type=FIFO")
    assert fifo.returncode == 0 and "type FIFO" in fifo.stdout, fifo.stderr
    assert admin(shared_cluster, "updateTopic", "-t", topic, "-c", "DefaultCluster", "-w", "2").returncode == 0
    [queues] = admin_json(shared_cluster, "topicRoute", "-t", topic)["queues"]
    assert (queues["write_queue_nums"], queues["message_type"]) == (2, "FIFO"), "a change without -a keeps the type"
    assert f"{topic}  FIFO" in admin(shared_cluster, "topicList").stdout
    for bad in ("+message.type=LIFO", "+retention.hours=3"):
        refused = admin(shared_cluster, "updateTopic", "-t", topic, "-c", "DefaultCluster", "-a", bad)
        assert refused.returncode == 1 and "ILLEGAL_TOPIC_ATTRIBUTE" in refused.stderr, refused


def test_subscription_group_update_get_and_delete(shared_cluster):
    group = f"G{uuid.uuid4().hex[:8]}"
    policy = '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":2000,"max":60000,"multiplier":3}}'
    updated = admin(shared_cluster, "updateSubGroup", "-g", group, "-c", "DefaultCluster", "-o", "true", "-r", "3",
                    "-p", policy)
    assert updated.returncode == 0 and "success" in updated.stdout, updated.stderr
    [config] = admin_json(shared_cluster, "getConsumerConfig", "-g", group)
    assert config == {"cluster": "DefaultCluster", "broker_name": "broker-a", "address": config["address"],
                      "groupName": group, "consumeEnable": True, "consumeMessageOrderly": True, "retryMaxTimes": 3,
                      "groupRetryPolicy": json.loads(policy), "configured": True}
    text = admin(shared_cluster, "getConsumerConfig", "-g", group).stdout.splitlines()
    assert text[0] == "=============================DefaultCluster:broker-a============================="
    assert f"{'retryMaxTimes':<40}=  3" in text and f"{'consumeMessageOrderly':<40}=  true" in text

    for flags, error in ((("-r", "65"), "ILLEGAL_RETRY_MAX_TIMES"), (("-p", "{not json"), "ILLEGAL_RETRY_POLICY")):
        refused = admin(shared_cluster, "updateSubGroup", "-g", group, "-c", "DefaultCluster", *flags)
        assert refused.returncode == 1 and error in refused.stderr, refused
    with Blocking(AdminClient, shared_cluster["access_point"]) as client:  # the broker's own check, past the CLI's
        address = config["address"]
        with pytest.raises(ClientError) as refused_by_broker:
            client.update_subscription_group([address], pb.SubscriptionGroupConfig(
                group_name=group, retry_max_times=65, retry_policy=pb.RetryPolicy(type="CUSTOMIZED", next_ms=[1000])))
        assert "ILLEGAL_RETRY_MAX_TIMES" in str(refused_by_broker.value)
        assert client.subscription_groups(group)[0][1].retry_max_times == 3, "nothing stored"

    replaced = admin(shared_cluster, "updateSubGroup", "-g", group, "-c", "DefaultCluster", "-s", "false")
    assert replaced.returncode == 0, replaced.stderr
    [config] = admin_json(shared_cluster, "getConsumerConfig", "-g", group)
    assert (config["consumeEnable"], config["consumeMessageOrderly"], config["retryMaxTimes"]) == (False, False, 16), \
        "an update replaces the whole config: what it leaves out gets the defaults"
    assert admin(shared_cluster, "deleteSubGroup", "-g", group, "-c", "DefaultCluster").returncode == 0
    [config] = admin_json(shared_cluster, "getConsumerConfig", "-g", group)
    assert (config["configured"], config["consumeEnable"]) == (False, True)


def test_unknown_topics_without_auto_create_are_errors_by_name(start_cluster):
    cluster = start_cluster(sets={"autoCreateTopicEnable": "false"})
    route = admin(cluster, "topicRoute", "-t", "NoSuchTopic")
    assert route.returncode == 1 and "TOPIC_NOT_FOUND" in route.stderr
    send = admin(cluster, "sendMessage", "-t", "NoSuchTopic", "-p", "x")
    assert send.returncode == 1 and "TOPIC_NOT_FOUND" in send.stdout + send.stderr


def test_broker_config_read_and_changed_live(shared_cluster, broker):
    config = admin_json(shared_cluster, "getBrokerConfig", "-b", broker["address"])
    assert config["listenPort"] == broker["address"].rsplit(":", 1)[1]
    changed = admin(shared_cluster, "updateBrokerConfig", "-k", "fileReservedTime", "-v", "48")
    assert changed.returncode == 0 and broker["address"] in changed.stdout
    assert admin_json(shared_cluster, "getBrokerConfig", "-b", broker["address"])["fileReservedTime"] == "48"
    refused = admin(shared_cluster, "updateBrokerConfig", "-k", "listenPort", "-v", "1", "-b", broker["address"])
    assert refused.returncode == 1 and "listenPort" in refused.stderr


def test_broker_status(shared_cluster, broker):
    assert admin_json(shared_cluster, "brokerStatus", "-b", broker["address"])
    assert admin(shared_cluster, "brokerStatus", "-b", broker["address"]).returncode == 0


def test_an_unreachable_broker_is_a_clear_error(shared_cluster):
    result = admin(shared_cluster, "getBrokerConfig", "-b", f"127.0.0.1:{free_base_port(1)}")
    assert result.returncode == 1 and "UNAVAILABLE" in result.stderr


def test_send_message_prints_its_status_and_exits_by_it(shared_cluster):
    topic = new_topic()
    sent = admin(shared_cluster, "sendMessage", "-t", topic, "-p", "hello", "--tag", "red", "-k", "k1 k2", "-i", "0")
    assert sent.returncode == 0 and sent.stdout.startswith("SEND_OK"), sent
    as_json = admin_json(shared_cluster, "sendMessage", "-t", topic, "-p", "again", "-i", "0")
    assert (as_json["status"], as_json["queue_id"], as_json["queue_offset"]) == ("SEND_OK", 0, 1)
    empty = admin(shared_cluster, "sendMessage", "-t", topic, "-p", "")
    assert empty.returncode != 0 and "MESSAGE_BODY_EMPTY" in empty.stdout + empty.stderr
    illegal = admin(shared_cluster, "sendMessage", "-t", "bad topic!", "-p", "x")
    assert illegal.returncode != 0 and "ILLEGAL_TOPIC" in illegal.stdout + illegal.stderr

    [first, second] = admin_json(shared_cluster, "consumeMessage", "-t", topic, "-q", "0")
    assert (first["body"], first["tag"], first["keys"], first["queue_offset"]) == ("hello", "red", ["k1", "k2"], 0)
    assert second["body"] == "again"
    text = admin(shared_cluster, "consumeMessage", "-t", topic, "-o", "1", "-c", "5")
    assert "again" in text.stdout and "hello" not in text.stdout


def test_consumer_progress_and_reset_by_time(shared_cluster):
    topic, group = new_topic(), f"G{uuid.uuid4().hex[:8]}"
    access_point = shared_cluster["access_point"]
    with Blocking(Producer, access_point) as producer:
        assert all(r.ok for r in producer.send_batch(topic, [Message(b"x")] * 10, queue_id=0))
    with Blocking(PullConsumer, access_point, group) as consumer:
        consumer.commit_offset(topic, 0, 4)
        progress = admin_json(shared_cluster, "consumerProgress", "-g", group, "-t", topic)
        [queue] = [q for q in progress["queues"] if q["queue_id"] == 0]
        assert (queue["broker_offset"], queue["consumer_offset"], queue["lag"]) == (10, 4, 6)
        assert progress["total_lag"] >= 6
        assert "total lag" in admin(shared_cluster, "consumerProgress", "-g", group).stdout

        reset = admin(shared_cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "now")
        assert reset.returncode == 0, reset.stderr
        assert consumer.get_offset(topic, 0) == 10
        assert admin(shared_cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "0").returncode == 0
        assert consumer.get_offset(topic, 0) == 0


def test_delete_topic(shared_cluster):
    topic = new_topic()
    assert admin(shared_cluster, "updateTopic", "-t", topic, "-c", "DefaultCluster").returncode == 0
    deleted = admin(shared_cluster, "deleteTopic", "-t", topic)
    assert deleted.returncode == 0, deleted.stderr
    check_for(10, 0.2, lambda: topic not in admin_json(shared_cluster, "topicList"), "topic gone from the list")


def test_a_change_for_every_broker_waits_for_each_answer_and_says_which_applied(start_cluster):
    """With a slave SIGKILLed, its refusal must not end the command before the master's call: the
    master applies the change, and the command names each broker's outcome and exits non-zero."""
    cluster = start_cluster(replicas=2)
    master, slave = sorted((p for p in cluster["processes"] if p["kind"] == "broker"),
                           key=lambda p: p["broker_id"])
    os.kill(slave["pid"], signal.SIGKILL)
    check_for(10, 0.05, lambda: not pid_alive(slave["pid"]), "the slave gone")
    changed = admin(cluster, "updateBrokerConfig", "-k", "enableAutoInSyncReplicas", "-v", "true")
    assert changed.returncode == 1
    assert f"updateBrokerConfig applied on {master['address']}" in changed.stdout.splitlines()
    assert any(line.startswith(f"updateBrokerConfig FAILED on {slave['address']}: ")
               for line in changed.stdout.splitlines()), changed.stdout
    assert admin_json(cluster, "getBrokerConfig", "-b", master["address"])["enableAutoInSyncReplicas"] == "true"

    topic = new_topic()
    created = admin(cluster, "updateTopic", "-t", topic, "-b", slave["address"], "--json")
    assert created.returncode == 1
    assert json.loads(created.stdout)["brokers"][slave["address"]].startswith("UNAVAILABLE")
