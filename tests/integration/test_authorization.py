"""Authorization (ACL 2.0, docs/security.md): users and rules made with `quorumq admin` on a
master-slave cluster with authenticationEnabled, authorizationEnabled and TLS on every port. A
Normal user does what its rules allow through the official Python client and nothing else; a
refused call is answered with the v5 FORBIDDEN (40300) or the catalogue's NO_PERMISSION, stores and
changes nothing, and the servers serve on. The slave copies users and rules; the name server learns
them from the masters. In controller mode (plaintext) a user survives a failover, and the
controllers refuse what only members or Super users may do."""

import json
import stat
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc
from rocketmq.v5.util.signature import Signature

from harness import LocalCluster, check_for, cli, official_round_trip_over_tls, v5_message
from quorumq import tls
from quorumq.client import AdminClient, Blocking
from quorumq.client import Credentials as QuorumqCredentials
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.core.cluster_auth import sign
from quorumq.grpc_errors import sent_error

ROOT, ROOT_SECRET = "root", "root-secret-7"
INNER = QuorumqCredentials("inner", "inner-secret-9")
FORBIDDEN = v5.Code.FORBIDDEN  # 40300
NO_PERMISSION, UNAUTHENTICATED = 302, 304  # the catalogue's entries
SETS = {"authenticationEnabled": "true", "authorizationEnabled": "true",
        "initAuthenticationUser": f'{{"username": "{ROOT}", "password": "{ROOT_SECRET}"}}',
        "innerClientAuthenticationCredentials": f'{{"accessKey": "{INNER.access_key}", '
                                                f'"secretKey": "{INNER.secret_key}"}}'}


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> dict:
    cluster = LocalCluster(tmp_path_factory.mktemp("authorization"), replicas=2, sets=SETS, tls=True)
    try:
        info = cluster.start()
        with pytest.MonkeyPatch.context() as environment:  # quorumq's clients here and in `cli` trust the CA
            environment.setenv(tls.CA_VARIABLE, info["ca"])
            yield info
    finally:
        cluster.stop()


def channel(cluster: dict, address: str) -> grpc.Channel:
    """To a process of the cluster: over TLS trusting its CA when it has one."""
    if "ca" not in cluster:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(Path(cluster["ca"]).read_bytes()))


def broker(cluster: dict, role: str) -> dict:
    return next(p for p in cluster["processes"] if p["kind"] == "broker" and p["role"] == role)


def admin(cluster: dict, *args: str, ak: str = ROOT, sk: str = ROOT_SECRET, stdin: str | None = None):
    return cli("admin", args[0], "-n", cluster["access_point"], "--ak", ak, "--sk", sk, *args[1:], stdin=stdin)


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def user(secured) -> dict:
    """A Normal user with its own topics and group: Pub on TA (and Sub, to read it back), Sub on
    TB (a route, but no sends), Sub on its group; no rule for TC."""
    tag = uuid.uuid4().hex[:6]
    names = {"name": f"u{tag}", "password": f"pw-{tag}", "TA": f"TA{tag}", "TB": f"TB{tag}", "TC": f"TC{tag}",
             "group": f"G{tag}"}
    cluster = secured["cluster"]
    for topic in ("TA", "TB", "TC"):
        ok(admin(secured, "updateTopic", "-t", names[topic], "-c", cluster, "-r", "1", "-w", "1"))
    # The password from the input (`-p -`), off the command line; the user signs with it below.
    ok(admin(secured, "createUser", "-u", names["name"], "-p", "-", "-c", cluster, stdin=names["password"] + "\n"))
    subject = f"User:{names['name']}"
    ok(admin(secured, "createAcl", "-s", subject, "-r", f"Topic:{names['TA']}", "-a", "Pub,Sub", "-d", "Allow",
             "-c", cluster))
    ok(admin(secured, "createAcl", "-s", subject, "-r", f"Topic:{names['TB']},Group:{names['group']}", "-a", "Sub",
             "-d", "Allow", "-c", cluster))
    return names


def headers(ak: str, sk: str) -> tuple[tuple[str, str], ...]:
    date_time = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return (("x-mq-date-time", date_time),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                              f"Signature={Signature.sign(sk, date_time)}"))


def stored(cluster: dict, topic: str) -> int:
    address = broker(cluster, "master")["address"]
    with Blocking(AdminClient, cluster["access_point"], credentials=INNER) as client:
        return sum(queue.max_offset for queue in client.queue_progress(address, "G", topic).queues)


def test_a_normal_user_does_what_its_rules_allow(secured, user):
    """The official client as the user, over TLS, sends to TA and receives it in its group; the
    name server answers its route queries (it learnt the user from the master's registration),
    but not TC's, on which no rule gives it Pub or Sub."""
    sent, received = official_round_trip_over_tls(secured, user["TA"], 5, user["group"],
                                                  (user["name"], user["password"]))
    assert len(sent) == 5 and sorted(received) == sorted(sent)
    with channel(secured, secured["access_point"]) as namesrv:
        routes = v5_grpc.MessagingServiceStub(namesrv)
        for topic, code in ((user["TA"], v5.Code.OK), (user["TB"], v5.Code.OK), (user["TC"], FORBIDDEN)):
            route = routes.QueryRoute(v5s.QueryRouteRequest(topic=v5.Resource(name=topic)),
                                      metadata=headers(user["name"], user["password"]), timeout=5)
            assert route.status.code == code, (topic, route.status)
    assert stored(secured, user["TA"]) == 5 and stored(secured, user["TC"]) == 0


def test_each_denied_v5_call_answers_forbidden(secured, user):
    """Raw v5 calls signed by the user, on the master: a send to TB (Sub only), a send to TA in a
    namespace (stored as NS%TA, which no rule names), a receive of TA in another group, an ack in
    it, a Telemetry stream publishing TC or reading in another group: 40300, nothing stored, no
    session; the user's allowed send and settings are served after."""
    signed = headers(user["name"], user["password"])
    namespaced = f"NS%{user['TA']}"
    ok(admin(secured, "updateTopic", "-t", namespaced, "-c", secured["cluster"], "-r", "1", "-w", "1"))
    with channel(secured, broker(secured, "master")["address"]) as master:
        stub = v5_grpc.MessagingServiceStub(master)
        sent = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(user["TB"], b"x")]),
                                metadata=signed, timeout=5)
        assert sent.status.code == FORBIDDEN and not sent.entries, sent.status
        assert "Pub" in sent.status.message and user["TB"] in sent.status.message
        receive = v5s.ReceiveMessageRequest(group=v5.Resource(name="GOther"), message_queue=v5.MessageQueue(
            topic=v5.Resource(name=user["TA"]), id=-1), filter_expression=v5.FilterExpression(expression="*"),
            batch_size=1, auto_renew=True)
        assert [answer.status.code for answer in stub.ReceiveMessage(receive, metadata=signed, timeout=5)] \
            == [FORBIDDEN]
        acked = stub.AckMessage(v5s.AckMessageRequest(group=v5.Resource(name="GOther"),
                                                      topic=v5.Resource(name=user["TA"])), metadata=signed, timeout=5)
        assert acked.status.code == FORBIDDEN
        in_namespace = v5_message(user["TA"], b"n")
        in_namespace.topic.resource_namespace = "NS"
        sent = stub.SendMessage(v5s.SendMessageRequest(messages=[in_namespace]), metadata=signed, timeout=5)
        assert sent.status.code == FORBIDDEN and namespaced in sent.status.message, sent.status
        assert stored(secured, user["TB"]) == 0 and stored(secured, namespaced) == 0
        served = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(user["TA"], b"y")]),
                                  metadata=signed, timeout=5)
        assert served.status.code == v5.Code.OK, served.status

        def telemetry(settings: v5.Settings) -> int:
            """The status of the answer to one settings command on a stream of its own."""
            answers = stub.Telemetry(iter([v5s.TelemetryCommand(settings=settings)]), metadata=signed, timeout=5)
            return next(answers).status.code

        publisher = v5.Settings(client_type=v5.ClientType.PRODUCER,
                                publishing=v5.Publishing(topics=[v5.Resource(name=user["TC"])]))
        reader = v5.Settings(client_type=v5.ClientType.SIMPLE_CONSUMER, subscription=v5.Subscription(
            group=v5.Resource(name="GOther"), subscriptions=[v5.SubscriptionEntry(
                topic=v5.Resource(name=user["TA"]), expression=v5.FilterExpression(expression="*"))]))
        assert telemetry(publisher) == FORBIDDEN and telemetry(reader) == FORBIDDEN
        publisher.publishing.topics[0].name = user["TA"]
        reader.subscription.group.name = user["group"]
        assert telemetry(publisher) == v5.Code.OK and telemetry(reader) == v5.Code.OK


def refused(cluster: dict, address: str, service: str, method: str, request, credentials: QuorumqCredentials) -> str:
    """The call, signed as quorumq's client signs it, refused with NO_PERMISSION; its detail."""
    return refusal(cluster, address, service, method, request, credentials, grpc.StatusCode.PERMISSION_DENIED,
                   NO_PERMISSION)


def refusal(cluster: dict, address: str, service: str, method: str, request, credentials: QuorumqCredentials,
            status: grpc.StatusCode, code: int) -> str:
    full_name = f"/{pb.DESCRIPTOR.services_by_name[service].full_name}/{method}"
    metadata = sign(credentials, full_name, request.SerializeToString(), time.time_ns() // 1_000_000,
                    uuid.uuid4().hex)
    with channel(cluster, address) as opened, pytest.raises(grpc.RpcError) as caught:
        getattr(getattr(pb_grpc, f"{service}Stub")(opened), method)(request, metadata=metadata, timeout=5)
    assert caught.value.code() is status, caught.value
    error = sent_error(caught.value.trailing_metadata())
    assert error is not None and error.code == code, error
    return error.detail


def test_a_normal_user_is_refused_every_admin_and_member_call(secured, user):
    """quorumq's client signing as the user: live config, topic and group changes, user and rule
    changes, the metadata (passwords), a registration with the name server, a batch send to a
    topic without Pub: NO_PERMISSION; the config and the stored messages are as they were."""
    master = broker(secured, "master")["address"]
    credentials = QuorumqCredentials(user["name"], user["password"])
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as client:
        before = client.broker_config(master)
    for method, request in [
            ("UpdateBrokerConfig", pb.ConfigUpdate(key="brokerPermission", value="0")),
            ("DeleteTopic", pb.TopicRequest(topic=user["TA"])),
            ("UpdateTopic", pb.TopicConfig(name=user["TA"], read_queue_nums=1, write_queue_nums=1, perm=0)),
            ("ResetOffsetByTime", pb.ResetOffsetRequest(group=user["group"], topic=user["TA"])),
            ("DeleteSubscriptionGroup", pb.GroupRequest(group=user["group"])),
            ("CreateUser", pb.AuthUser(username="mallory", password="x", user_type="Super")),
            ("CreateAcl", pb.Acl(subject=f"User:{user['name']}", entries=[
                pb.AclEntry(resource="*", actions=["All"], decision="Allow")])),
            ("GetMetadata", pb.MetadataRequest()),
            ("GetAccess", pb.Empty())]:
        refused(secured, master, "BrokerAdmin", method, request, credentials)
    assert "Super" in refused(secured, master, "BrokerAdmin", "UpdateBrokerConfig",
                              pb.ConfigUpdate(key="maxMessageSize", value="1"), credentials)
    assert "Pub" in refused(secured, master, "MessageWriter", "SendBatch",
                            pb.SendBatchRequest(topic=user["TB"], queue_id=0, count=1, records=b"x"), credentials)
    registration = pb.BrokerRegistration(cluster=secured["cluster"], broker_name="broker-a", broker_id=0,
                                         address="127.0.0.1:1", role="SYNC_MASTER")
    for method in ("RegisterBroker", "UnregisterBroker"):
        assert "cluster members" in refused(secured, secured["access_point"], "NameServer", method, registration,
                                            credentials)
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as client:
        assert client.broker_config(master) == before
        assert client.route(user["TA"]).brokers[0].addresses[0] == master
    assert stored(secured, user["TB"]) == 0


def test_a_deny_wins_and_deleted_rules_deny(secured, user):
    """A Deny on TA* beats the Allow on TA; once deleted, the Allow serves again; once the user's
    rules are gone, nothing is allowed."""
    subject, signed = f"User:{user['name']}", lambda: headers(user["name"], user["password"])

    def send_code() -> int:
        with channel(secured, broker(secured, "master")["address"]) as master:
            return v5_grpc.MessagingServiceStub(master).SendMessage(
                v5s.SendMessageRequest(messages=[v5_message(user["TA"], b"z")]), metadata=signed(), timeout=5
            ).status.code

    cluster = secured["cluster"]
    ok(admin(secured, "createAcl", "-s", subject, "-r", "Topic:TA*", "-a", "All", "-d", "Deny", "-c", cluster))
    assert send_code() == FORBIDDEN
    ok(admin(secured, "deleteAcl", "-s", subject, "-r", "Topic:TA*", "-c", cluster))
    assert send_code() == v5.Code.OK
    ok(admin(secured, "deleteAcl", "-s", subject, "-c", cluster))
    assert send_code() == FORBIDDEN


def test_users_and_rules_listed_disabled_copied_by_the_slave(secured, user):
    """getUser, listUser, getAcl and listAcl show what was made (a password as ******); a disabled
    user is refused as unauthenticated; the slave holds the same users and rules, in files only
    its owner reads; a Normal user cannot run the commands."""
    cluster, name = secured["cluster"], user["name"]
    shown = json.loads(ok(admin(secured, "getUser", "-u", name, "-c", cluster, "--json")))
    assert [u for users in shown.values() for u in users] == [
        {"username": name, "password": "******", "userType": "Normal", "userStatus": "enable"}]
    assert name in ok(admin(secured, "listUser", "-c", cluster))
    rules = json.loads(ok(admin(secured, "getAcl", "-s", f"User:{name}", "-c", cluster, "--json")))
    resources = {entry["resource"]: entry for rule in next(iter(rules.values())) for entry in rule["policies"]}
    assert resources[f"Topic:{user['TA']}"]["actions"] == ["Pub", "Sub"]
    assert resources[f"Group:{user['group']}"]["decision"] == "Allow"
    assert f"User:{name}" in ok(admin(secured, "listAcl", "-c", cluster))
    denied = admin(secured, "listUser", "-c", cluster, ak=name, sk=user["password"])
    assert denied.returncode == 1 and "NO_PERMISSION" in denied.stderr, denied

    slave = broker(secured, "slave")
    with Blocking(AdminClient, secured["access_point"], credentials=INNER) as client:
        master_access = client.access(broker(secured, "master")["address"])
        check_for(20, 0.2, lambda: client.access(slave["address"]) == master_access,
                  "the slave holds the master's users and rules")
    for file_name in ("users.log", "acls.log"):
        mode = (Path(slave["data_dir"]) / "config" / file_name).stat().st_mode
        assert stat.S_IMODE(mode) == 0o600, oct(mode)

    ok(admin(secured, "updateUser", "-u", name, "-s", "disable", "-c", cluster))
    with channel(secured, broker(secured, "master")["address"]) as master:
        sent = v5_grpc.MessagingServiceStub(master).SendMessage(
            v5s.SendMessageRequest(messages=[v5_message(user["TA"], b"x")]),
            metadata=headers(name, user["password"]), timeout=5)
    assert sent.status.code == v5.Code.UNAUTHORIZED and "disabled" in sent.status.message
    ok(admin(secured, "deleteUser", "-u", name, "-c", cluster))
    assert name not in ok(admin(secured, "listUser", "-c", cluster))


def test_a_user_and_its_rules_survive_a_failover(tmp_path_factory, monkeypatch):
    """Controller mode with allAckInSyncStateSet: createUser and createAcl are answered once every
    SyncStateSet member holds them, so with the master killed at once after, the new master
    authenticates the user and applies its rules. The controllers know the config's users alone:
    the user made at run time is refused an election as unauthenticated, and the init user (a
    Super user, not a member) a member's SyncStateSet change and registration."""
    from controller_group import started_group

    monkeypatch.delenv(tls.CA_VARIABLE, raising=False)  # this group is plaintext, unlike the module's cluster
    with started_group(tmp_path_factory.mktemp("acl-failover"), controllers=1, sets=SETS, credentials=INNER) as group:
        group.wait_in_sync()
        master = group.master()
        topic, name, password = f"T{uuid.uuid4().hex[:8]}", "carol", "carol-secret"
        group.admin.update_topic_on([broker["address"] for broker in group.brokers], topic, 1, 1)
        group.admin.change_access([master["address"]], "CreateUser", pb.AuthUser(username=name, password=password))
        group.admin.change_access([master["address"]], "CreateAcl", pb.Acl(subject=f"User:{name}", entries=[
            pb.AclEntry(resource=f"Topic:{topic}", actions=["Pub"], decision="Allow")]))
        group.kill(master)
        elected = check_for(60, 0.1, lambda: next((broker for broker in group.brokers
                                                   if broker is not master and group.says_master(broker)), None),
                            "a new master")
        with grpc.insecure_channel(elected["address"]) as channel:
            stub = v5_grpc.MessagingServiceStub(channel)
            sent = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(topic, b"after")]),
                                    metadata=headers(name, password), timeout=5)
            assert sent.status.code == v5.Code.OK, sent.status
            other = stub.SendMessage(v5s.SendMessageRequest(messages=[v5_message(f"{topic}x", b"no")]),
                                     metadata=headers(name, password), timeout=5)
            assert other.status.code == FORBIDDEN, other.status
        controller, cluster = group.controllers[0]["address"], group.cluster
        election = pb.ElectMasterRequest(cluster=cluster["cluster"], broker_name="broker-a",
                                         broker_id=master["broker_id"], designated=True)
        refusal(cluster, controller, "Controller", "ElectMaster", election, QuorumqCredentials(name, password),
                grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED)
        root = QuorumqCredentials(ROOT, ROOT_SECRET)
        for method, request in (("AlterSyncStateSet", pb.AlterSyncStateSetRequest(cluster=cluster["cluster"],
                                                                                   broker_name="broker-a")),
                                ("RegisterBroker", pb.RegisterBrokerRequest(cluster=cluster["cluster"],
                                                                            broker_name="broker-a"))):
            assert "cluster members" in refused(cluster, controller, "Controller", method, request, root)
        assert group.master()["address"] == elected["address"]
