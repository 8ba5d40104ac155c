"""Authentication on quorumq's cluster protocol (docs/security.md): a `quorumq up` cluster of a
master and a slave with authenticationEnabled comes up and replicates, its members signing their
calls with the inner credentials; the attacks of issue 22 made as unsigned raw calls (a broker
registration that would hijack a route, live config changes, a topic's deletion, sends and pulls)
are refused with UNAUTHENTICATED and change nothing; a replayed, stale or wrongly signed call is
refused; `quorumq admin --ak/--sk` and the environment's credentials are served. The controllers'
refusals are in test_official_authentication.py, beside the v5 checks in controller mode."""

import os
import subprocess
import sys
import time
import uuid

import grpc
import pytest
from rocketmq import ClientConfiguration
from rocketmq import Credentials as OfficialCredentials

from harness import LocalCluster, check_for, cli, create_topic, official_message, started_producer
from quorumq.client import AdminClient, Blocking, Credentials, Message, Producer, PullConsumer
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.grpc_errors import sent_error

ROOT, ROOT_SECRET = "root", "root-secret-7"
INNER = Credentials("inner", "inner-secret-9")
SETS = {"authenticationEnabled": "true",
        "initAuthenticationUser": f'{{"username": "{ROOT}", "password": "{ROOT_SECRET}"}}',
        "innerClientAuthenticationCredentials": f'{{"accessKey": "{INNER.access_key}", '
                                                f'"secretKey": "{INNER.secret_key}"}}'}
UNAUTHENTICATED = 304  # the catalogue's entry


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> dict:
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster-auth"), replicas=2, sets=SETS)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def broker(cluster: dict, role: str) -> str:
    return next(p["address"] for p in cluster["processes"] if p["kind"] == "broker" and p["role"] == role)


@pytest.fixture
def topic(secured) -> str:
    """A topic with 4 messages in queue 0, sent signed."""
    name = f"T{uuid.uuid4().hex[:8]}"
    create_topic(secured, name, 1, INNER)
    with Blocking(Producer, secured["access_point"], credentials=INNER) as producer:
        for index in range(4):
            assert producer.send(name, Message(f"m{index}".encode()), queue_id=0).ok
    return name


def refused(call, request, metadata=()) -> str:
    """The call's refusal: UNAUTHENTICATED with the catalogue's entry; its detail."""
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata, timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED, caught.value
    error = sent_error(caught.value.trailing_metadata())
    assert error is not None and error.code == UNAUTHENTICATED, error
    assert "UNAUTHENTICATED" in caught.value.details() and INNER.secret_key not in caught.value.details()
    return error.detail


def bodies(cluster: dict, topic: str) -> list[bytes]:
    with Blocking(PullConsumer, cluster["access_point"], "reader", credentials=INNER) as consumer:
        return [message.body for message in consumer.pull(topic, 0, 0, 32).messages]


def test_an_unsigned_registration_does_not_hijack_the_route(secured, topic):
    """Issue 22's attack: RegisterBroker(broker-a, id 0, another address) took the route and a fake
    broker got every send. Unsigned, it is refused; the route still names the real master, and an
    official client with credentials sends to it."""
    master = broker(secured, "master")
    fake = pb.BrokerRegistration(cluster=secured["cluster"], broker_name="broker-a", broker_id=0,
                                 address="127.0.0.1:1", ha_address="127.0.0.1:2", role="ASYNC_MASTER",
                                 topics=[pb.TopicConfig(name=topic, read_queue_nums=1, write_queue_nums=1, perm=6)])
    with grpc.insecure_channel(secured["access_point"]) as channel:
        stub = pb_grpc.NameServerStub(channel)
        refused(stub.RegisterBroker, fake)
        refused(stub.UnregisterBroker, pb.BrokerRegistration(cluster=secured["cluster"], broker_name="broker-a",
                                                             broker_id=0, address=master))
        refused(stub.DeleteTopic, pb.TopicRequest(topic=topic))
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as admin:
        route = admin.route(topic)
    assert [dict(data.addresses)[0] for data in route.brokers] == [master]
    config = ClientConfiguration(secured["access_point"], OfficialCredentials(ROOT, ROOT_SECRET), request_timeout=5)
    producer = started_producer(config)
    try:
        producer.send(official_message(topic, b"official"))
    finally:
        producer.shutdown()
    assert b"official" in bodies(secured, topic)


def test_unsigned_broker_admin_and_data_calls_change_nothing(secured, topic):
    """Unsigned live config changes, a topic's deletion or re-creation, a send and a pull are
    refused on the master; its config and the topic's messages are as they were."""
    master = broker(secured, "master")
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as admin:
        before = admin.broker_config(master)
    with grpc.insecure_channel(master) as channel:
        stub = pb_grpc.BrokerAdminStub(channel)
        refused(stub.UpdateBrokerConfig, pb.ConfigUpdate(key="brokerPermission", value="0"))
        refused(stub.UpdateBrokerConfig, pb.ConfigUpdate(key="maxMessageSize", value="1"))
        refused(stub.DeleteTopic, pb.TopicRequest(topic=topic))
        refused(stub.UpdateTopic, pb.TopicConfig(name=topic, read_queue_nums=1, write_queue_nums=1, perm=0))
        refused(stub.GetBrokerConfig, pb.Empty())
        refused(pb_grpc.MessageWriterStub(channel).SendBatch,
                pb.SendBatchRequest(topic=topic, queue_id=0, count=1, records=b"x"))
        refused(pb_grpc.MessageReaderStub(channel).PullBatch,
                pb.PullBatchRequest(group="G", topic=topic, queue_id=0, offset=0, max_count=32))
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as admin:
        assert admin.broker_config(master) == before
    assert bodies(secured, topic) == [b"m0", b"m1", b"m2", b"m3"]


def test_a_replayed_a_stale_and_a_wrongly_signed_call_are_refused(secured, topic):
    """A signed call made by hand (as a captured one would be sent again): accepted once; its
    replay, a call signed six minutes ago and one signed with a wrong secret are refused."""
    from quorumq.core.cluster_auth import UNKNOWN_OR_WRONG, sign

    method = "/quorumq.cluster.BrokerAdmin/UpdateTopic"
    request = pb.TopicConfig(name=topic, read_queue_nums=1, write_queue_nums=1, perm=6)
    now_ms = time.time_ns() // 1_000_000
    captured = sign(INNER, method, request.SerializeToString(), now_ms, uuid.uuid4().hex)
    with grpc.insecure_channel(broker(secured, "master")) as channel:
        stub = pb_grpc.BrokerAdminStub(channel)
        stub.UpdateTopic(request, metadata=captured, timeout=5)
        assert "already used" in refused(stub.UpdateTopic, request, captured)
        stale = sign(INNER, method, request.SerializeToString(), now_ms - 6 * 60_000, uuid.uuid4().hex)
        assert "behind the server's time" in refused(stub.UpdateTopic, request, stale)
        wrong = sign(Credentials(INNER.access_key, "guess"), method, request.SerializeToString(), now_ms,
                     uuid.uuid4().hex)
        assert refused(stub.UpdateTopic, request, wrong) == UNKNOWN_OR_WRONG  # the same for an unknown key
        other = pb.TopicConfig(name=topic, read_queue_nums=1, write_queue_nums=1, perm=0)  # the body swapped
        assert UNKNOWN_OR_WRONG == refused(stub.UpdateTopic, other, sign(
            INNER, method, request.SerializeToString(), now_ms, uuid.uuid4().hex))
    assert bodies(secured, topic) == [b"m0", b"m1", b"m2", b"m3"]


def test_quorumq_admin_signs_with_ak_sk_or_the_environment(secured):
    """`quorumq admin updateTopic --ak --sk` is served, then the official client with credentials
    sends to the topic; unsigned the command fails naming UNAUTHENTICATED; the environment's
    credentials serve as --ak/--sk do."""
    name = f"T{uuid.uuid4().hex[:8]}"
    access_point = secured["access_point"]
    unsigned = cli("admin", "updateTopic", "-n", access_point, "-t", name, "-c", secured["cluster"])
    assert unsigned.returncode == 1 and "UNAUTHENTICATED" in unsigned.stderr, unsigned
    created = cli("admin", "updateTopic", "-n", access_point, "--ak", ROOT, "--sk", ROOT_SECRET, "-t", name,
                  "-c", secured["cluster"], "-r", "2", "-w", "2")
    assert created.returncode == 0, created.stderr
    config = ClientConfiguration(access_point, OfficialCredentials(ROOT, ROOT_SECRET), request_timeout=5)
    producer = started_producer(config)
    try:
        producer.send(official_message(name, b"official"))
    finally:
        producer.shutdown()
    environment = {**os.environ, "QUORUMQ_ACCESS_KEY": INNER.access_key, "QUORUMQ_SECRET_KEY": INNER.secret_key}
    listed = subprocess.run([sys.executable, "-m", "quorumq.cli.main", "admin", "topicList", "-n", access_point],
                            capture_output=True, text=True, timeout=30, env=environment)
    assert listed.returncode == 0 and name in listed.stdout, listed.stderr


def test_the_slave_replicates_what_the_master_stores(secured, topic):
    """The slave, which copies the master's topics over the cluster protocol (signed), holds the
    messages sent to the master."""
    slave = broker(secured, "slave")
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as admin:
        check_for(20, 0.2, lambda: sum(q.max_offset for q in admin.queue_progress(slave, "G", topic).queues) == 4,
                  "the slave holds the topic's 4 messages")


def test_without_authorization_a_normal_user_still_cannot_touch_users(secured):
    """authorizationEnabled off: a Normal user may change topics, but reading or changing users and
    rules (which would let it read passwords or make itself Super) needs a Super user whenever
    authentication is on."""
    from quorumq.core.cluster_auth import sign

    master = broker(secured, "master")
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as admin:
        admin.change_access([master], "CreateUser", pb.AuthUser(username="norm", password="norm-secret"))
    normal = Credentials("norm", "norm-secret")
    with Blocking(AdminClient, secured["access_point"], credentials=normal) as admin:
        admin.update_topic(master, f"T{uuid.uuid4().hex[:8]}", 1, 1)  # everything else: authorization is off
    with grpc.insecure_channel(master) as channel:
        stub = pb_grpc.BrokerAdminStub(channel)
        for method, request in (("CreateUser", pb.AuthUser(username="mallory", password="x", user_type="Super")),
                                ("UpdateUser", pb.AuthUser(username="norm", user_type="Super")),
                                ("GetAccess", pb.Empty()), ("GetMetadata", pb.MetadataRequest())):
            metadata = sign(normal, f"/quorumq.cluster.BrokerAdmin/{method}", request.SerializeToString(),
                            time.time_ns() // 1_000_000, uuid.uuid4().hex)
            with pytest.raises(grpc.RpcError) as caught:
                getattr(stub, method)(request, metadata=metadata, timeout=5)
            assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED, (method, caught.value)
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as admin:
        assert [(u.username, u.user_type) for u in admin.access(master).users] == [("norm", "Normal")]
