"""Authentication on the v5 ports (ACL 2.0's first slice, docs/security.md): a `quorumq up` cluster
with authenticationEnabled serves the official Python client that signs with a known user's
credentials, directly and through a proxy, and refuses one without credentials, with a wrong
secret or as an unknown user; a
refused request stores nothing and the servers serve on. Raw gRPC calls with hand-made headers read
the v5 code (40100) that the official client only logs, on the name server's and the broker's
service, for a unary call, a server stream and the Telemetry stream."""

import json
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc
from rocketmq.v5.util.signature import Signature

from controller_group import started_group
from harness import (
    THROUGH_PROXY,
    LocalCluster,
    check_for,
    create_topic,
    official_access_point,
    official_message,
    process_of,
    receive_all,
    started_producer,
    v5_message,
)
from quorumq.client import AdminClient, Blocking
from quorumq.client import Credentials as QuorumqCredentials
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.errors import Error
from quorumq.grpc_errors import sent_error

ROOT, ROOT_SECRET = "root", "root-secret-7"
INNER, INNER_SECRET = "inner", "inner-secret-9"
UNAUTHORIZED = v5.Code.UNAUTHORIZED  # 40100
GROUP = "GAuth"
INNER_JSON = f'{{"accessKey": "{INNER}", "secretKey": "{INNER_SECRET}"}}'
SIGNED = QuorumqCredentials(INNER, INNER_SECRET)  # quorumq's own client's, on the cluster protocol


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> dict:
    cluster = LocalCluster(tmp_path_factory.mktemp("secured"), proxies=1, dashboard=True, sets={
        "authenticationEnabled": "true",
        "initAuthenticationUser": f'{{"username": "{ROOT}", "password": "{ROOT_SECRET}"}}',
        "innerClientAuthenticationCredentials": INNER_JSON})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def topic(secured) -> str:
    name = f"T{uuid.uuid4().hex[:8]}"
    create_topic(secured, name, 2, SIGNED)
    return name


def client_config(cluster: dict, ak: str = ROOT, sk: str = ROOT_SECRET) -> ClientConfiguration:
    return ClientConfiguration(official_access_point(cluster), Credentials(ak, sk), request_timeout=5)


def stored(cluster: dict, topic: str) -> int:
    """How many messages the topic's queues hold, read on the admin path (not a v5 call)."""
    broker = process_of(cluster, "broker")["address"]
    with Blocking(AdminClient, cluster["access_point"], credentials=SIGNED) as admin:
        return sum(queue.max_offset for queue in admin.queue_progress(broker, GROUP, topic).queues)


def signed(ak: str, sk: str) -> tuple[tuple[str, str], ...]:
    date_time = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return (("x-mq-date-time", date_time),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                              f"Signature={Signature.sign(sk, date_time)}"))


def send_and_receive(cluster: dict, topic: str, ak: str, sk: str, count: int) -> None:
    config = client_config(cluster, ak, sk)
    producer = started_producer(config)
    consumer = SimpleConsumer(config, GROUP, {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        sent = {producer.send(official_message(topic, f"m{index}".encode())).message_id for index in range(count)}
        received = receive_all(consumer, count)
        assert {message.message_id for message in received} == sent
        for message in received:
            consumer.ack(message)
    finally:
        consumer.shutdown()
        producer.shutdown()


def test_the_init_user_and_the_inner_credentials_send_and_receive(secured, topic):
    send_and_receive(secured, topic, ROOT, ROOT_SECRET, 10)
    send_and_receive(secured, topic, INNER, INNER_SECRET, 2)
    assert stored(secured, topic) == 12


def test_behind_a_proxy_the_broker_checks_the_clients_signature(secured, topic):
    """A proxy checks no signature itself but passes the client's on with each call (docs/proxy.md)."""
    proxied = {**secured, "access_point": secured["proxy_access_point"]}
    send_and_receive(proxied, topic, ROOT, ROOT_SECRET, 3)
    producer = started_producer(client_config(proxied, ROOT, "wrong-secret"))
    try:
        with pytest.raises(Exception):  # noqa: B017 (the official client's refusal has no type of its own)
            producer.send(official_message(topic, b"refused"))
    finally:
        producer.shutdown()
    assert stored(secured, topic) == 3


@pytest.mark.parametrize("ak, sk", [("", ""), (ROOT, "wrong-secret"), ("mallory", ROOT_SECRET)],
                         ids=["no credentials", "a wrong secret", "an unknown user"])
def test_an_unauthenticated_client_stores_nothing(secured, topic, ak, sk):
    """The client's start succeeds (its QueryRoute refusal is only logged), every send fails on the
    route; nothing is stored and a signed client is served as before. A proxy checks no signature
    itself (docs/proxy.md): through one the route is answered and the broker refuses each send."""
    producer = started_producer(client_config(secured, ak, sk))
    try:
        with pytest.raises(Exception, match="40100" if THROUGH_PROXY else "route"):
            producer.send(official_message(topic, b"refused"))
    finally:
        producer.shutdown()
    assert stored(secured, topic) == 0
    send_and_receive(secured, topic, ROOT, ROOT_SECRET, 1)
    assert stored(secured, topic) == 1


def test_the_dashboard_of_quorumq_up_signs_its_test_message(secured, topic):
    """`quorumq up` gives its dashboard the inner credentials: its test message (quorumq's own
    producer, which asks the name server's v5 QueryRoute for the route) is served."""
    def send() -> dict:
        request = urllib.request.Request(f"{secured['dashboard']}api/send", method="POST",
                                         data=json.dumps({"topic": topic, "body": "signed"}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    result = check_for(10, 0.2, send, "the dashboard answers")
    assert result["ok"] and result["result"].startswith("SEND_OK"), result
    assert stored(secured, topic) == 1
    # What another site's page could make a browser post without a CORS preflight is refused.
    form = urllib.request.Request(f"{secured['dashboard']}api/send", method="POST",
                                  data=json.dumps({"topic": topic, "body": "forged"}).encode(),
                                  headers={"Content-Type": "text/plain"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(form, timeout=10)
    assert refused.value.code == 415
    assert stored(secured, topic) == 1


@pytest.mark.parametrize("metadata", [
    (), signed("", ""), signed(ROOT, "wrong-secret"), signed("mallory", ROOT_SECRET),
    (("x-mq-date-time", "20261128T010203Z"), ("authorization", "MQv2-HMAC-SHA1 Credential=root, Signature=00")),
], ids=["no header", "empty credentials", "a wrong secret", "an unknown user", "a malformed signature"])
def test_each_v5_service_answers_40100(secured, topic, metadata):
    namesrv, broker = secured["access_point"], process_of(secured, "broker")["address"]
    with grpc.insecure_channel(namesrv) as channel:
        route = v5_grpc.MessagingServiceStub(channel).QueryRoute(
            v5s.QueryRouteRequest(topic=v5.Resource(name=topic)), metadata=metadata, timeout=5)
    assert route.status.code == UNAUTHORIZED and not route.message_queues
    with grpc.insecure_channel(broker) as channel:
        stub = v5_grpc.MessagingServiceStub(channel)
        sent = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(topic, b"raw")]),
                                metadata=metadata, timeout=5)
        assert sent.status.code == UNAUTHORIZED and not sent.entries
        receive = v5s.ReceiveMessageRequest(group=v5.Resource(name=GROUP), message_queue=v5.MessageQueue(
            topic=v5.Resource(name=topic), id=-1), filter_expression=v5.FilterExpression(expression="*"),
            batch_size=1, auto_renew=True)
        received = list(stub.ReceiveMessage(receive, metadata=metadata, timeout=5))
        assert [answer.status.code for answer in received] == [UNAUTHORIZED]
        settings = v5s.TelemetryCommand(settings=v5.Settings(client_type=v5.ClientType.PRODUCER))
        commands = list(stub.Telemetry(iter([settings]), metadata=metadata, timeout=5))
        assert [command.status.code for command in commands] == [UNAUTHORIZED]
        assert stored(secured, topic) == 0
        # The same calls signed by the init user are served.
        sent = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(topic, b"raw")]),
                                metadata=signed(ROOT, ROOT_SECRET), timeout=5)
        assert sent.status.code == v5.Code.OK, sent.status
    assert stored(secured, topic) == 1


def stale(ak: str, sk: str, age_s: int) -> tuple[tuple[str, str], ...]:
    """Headers correctly signed over a date-time `age_s` seconds old."""
    date_time = datetime.fromtimestamp(time.time() - age_s, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return (("x-mq-date-time", date_time),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                              f"Signature={Signature.sign(sk, date_time)}"))


def test_controller_mode_replicas_check_what_they_forward_and_the_window(tmp_path_factory):
    """In controller mode a slave forwards a client's request to the master with the client's
    headers: a signed one is stored through a slave, an unsigned or stale one (the window on) is
    refused by the slave and the master alike, and nothing of them is stored. The group, whose
    members sign their cluster-protocol calls with the inner credentials, replicates; the
    controller refuses an unsigned electMaster, config update and cleanBrokerData."""
    sets = {"authenticationEnabled": "true", "authenticationDateTimeWindowMillis": "60000",
            "initAuthenticationUser": f'{{"username": "{ROOT}", "password": "{ROOT_SECRET}"}}',
            "innerClientAuthenticationCredentials": INNER_JSON}
    with started_group(tmp_path_factory.mktemp("secured-controller"), controllers=1, sets=sets,
                       credentials=SIGNED) as group:
        group.wait_in_sync()
        master, slave = group.master(), group.slaves()[0]
        topic = f"T{uuid.uuid4().hex[:8]}"
        group.admin.update_topic_on([broker["address"] for broker in group.brokers], topic, 1, 1)
        for broker in (slave, master):
            with grpc.insecure_channel(broker["address"]) as channel:
                stub = v5_grpc.MessagingServiceStub(channel)
                for metadata in ((), signed(ROOT, "wrong-secret"), stale(ROOT, ROOT_SECRET, 120),
                                 stale(ROOT, ROOT_SECRET, -120)):
                    sent = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(topic, b"raw")]),
                                            metadata=metadata, timeout=5)
                    assert sent.status.code == UNAUTHORIZED, (broker["address"], metadata, sent.status)
                sent = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(topic, b"signed")]),
                                        metadata=stale(ROOT, ROOT_SECRET, 30), timeout=5)
                assert sent.status.code == v5.Code.OK, (broker["address"], sent.status)
        progress = group.admin.queue_progress(master["address"], GROUP, topic)
        assert sum(queue.max_offset for queue in progress.queues) == 2
        for other in group.slaves():  # the brokers replicate with authentication on
            group.wait_caught_up(other, master)
        # The controllers' cluster-protocol service: an unsigned election, config change or data
        # clean-up is refused with UNAUTHENTICATED, and nothing changes.
        config = group.admin_json("getControllerConfig")
        with grpc.insecure_channel(group.controllers[0]["address"]) as channel:
            stub = pb_grpc.ControllerStub(channel)
            for call, request in (
                    (stub.ElectMaster, pb.ElectMasterRequest(cluster=group.cluster["cluster"], broker_name="broker-a",
                                                             broker_id=slave["broker_id"], designated=True)),
                    (stub.UpdateControllerConfig, pb.ConfigUpdate(key="enableElectUncleanMaster", value="true")),
                    (stub.CleanBrokerData, pb.CleanBrokerDataRequest(cluster=group.cluster["cluster"],
                                                                     broker_name="broker-a"))):
                with pytest.raises(grpc.RpcError) as caught:
                    call(request, timeout=5)
                assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED, caught.value
                assert sent_error(caught.value.trailing_metadata()).code == Error.UNAUTHENTICATED.code
        assert group.admin_json("getControllerConfig") == config
        assert group.master()["address"] == master["address"]
