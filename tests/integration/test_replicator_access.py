"""The replicator between two clusters with authenticationEnabled, authorizationEnabled and TLS,
each with its own init user and inner credentials: it signs as its own Super user on each side
(the primary's from the environment, the standby's from the command line), its Spark tasks too, and
its config job copies the users and rules made on the primary. Without credentials it is refused at
once, saying which cluster refused it and how to give it a user."""

import uuid
from pathlib import Path

import pytest

from harness import Driver, LocalCluster, check_for, cli, create_topic
from quorumq import tls
from quorumq.client import AdminClient, Blocking, Credentials, Message, Producer
from quorumq.replicator import jobs
from quorumq.replicator.jobs import Settings
from replicator_support import new_topic, queue_ends, worker_environment

ROOTS = {"A": Credentials("root-a", "root-a-secret-3"), "B": Credentials("root-b", "root-b-secret-5")}
WAIT_S = 60.0


def secured_sets(name: str) -> dict[str, str]:
    root = ROOTS[name]
    return {"authenticationEnabled": "true", "authorizationEnabled": "true",
            "initAuthenticationUser": f'{{"username": "{root.access_key}", "password": "{root.secret_key}"}}',
            "innerClientAuthenticationCredentials": f'{{"accessKey": "inner-{name}", '
                                                    f'"secretKey": "inner-{name}-secret"}}'}


@pytest.fixture(scope="module")
def secured_pair(tmp_path_factory):
    """Clusters A (primary) and B (standby), each with its own CA; this process and the processes it
    starts trust both through one bundle in QUORUMQ_TLS_CA."""
    started = [LocalCluster(tmp_path_factory.mktemp(f"secured-{name}"), cluster=name, tls=True,
                            sets=secured_sets(name)) for name in ROOTS]
    try:
        infos = [cluster.start() for cluster in started]
        bundle = tmp_path_factory.mktemp("ca") / "both.pem"
        bundle.write_bytes(b"".join(Path(info["ca"]).read_bytes() for info in infos))
        with pytest.MonkeyPatch.context() as environment:
            environment.setenv(tls.CA_VARIABLE, str(bundle))
            worker_environment()
            yield infos
    finally:
        for cluster in started:
            cluster.stop()


def admin(cluster: dict, *args: str) -> str:
    root = ROOTS[cluster["cluster"]]
    result = cli("admin", args[0], "-n", cluster["access_point"], "--ak", root.access_key, "--sk", root.secret_key,
                 "-c", cluster["cluster"], *args[1:])
    assert result.returncode == 0, result.stderr
    return result.stdout


def access(cluster: dict) -> tuple[dict, dict]:
    """The users (name -> (password, type, status)) and rules (subject -> entries) of the cluster's
    master."""
    with Blocking(AdminClient, cluster["access_point"], credentials=ROOTS[cluster["cluster"]]) as client:
        [master] = client.brokers(masters_only=True)
        held = client.access(master.address)
    return ({user.username: (user.password, user.user_type, user.user_status) for user in held.users},
            {acl.subject: sorted((e.resource, tuple(e.actions), e.decision) for e in acl.entries) for acl in held.acls})


def replicator_args(primary: dict, standby: dict, topic: str, checkpoint: Path) -> list[str]:
    return ["--source", primary["access_point"], "--target", standby["access_point"], "--topics", topic,
            "--checkpoint", str(checkpoint)]


def test_a_replicator_without_credentials_is_refused_and_says_how_to_give_them(secured_pair, tmp_path):
    primary, standby = secured_pair
    result = cli("replicator", "run", *replicator_args(primary, standby, "T", tmp_path))
    assert result.returncode == 1
    assert f"quorumq replicator: the primary cluster at {primary['access_point']} refused the replicator: " \
           "UNAUTHENTICATED" in result.stderr
    assert "--source-ak and --source-sk, or QUORUMQ_SOURCE_ACCESS_KEY and QUORUMQ_SOURCE_SECRET_KEY" in result.stderr
    assert not (tmp_path / "config").exists(), "refused before Spark started a job"


def test_the_replicator_signs_on_both_sides_and_copies_users_and_rules(secured_pair, tmp_path, monkeypatch):
    primary, standby = secured_pair
    topic, tag = new_topic(), uuid.uuid4().hex[:6]
    alice, bob = Credentials(f"alice{tag}", "alice-pw-1"), Credentials(f"bob{tag}", "bob-pw-1")
    create_topic(primary, topic, 2, ROOTS["A"])
    for user in (alice, bob):
        admin(primary, "createUser", "-u", user.access_key, "-p", user.secret_key)
        admin(primary, "createAcl", "-s", f"User:{user.access_key}", "-r", f"Topic:{topic}", "-a", "Pub,Sub",
              "-d", "Allow")
    with Blocking(Producer, primary["access_point"], credentials=alice) as producer:
        assert all(result.ok for result in producer.send_batch(topic, [Message(b"m%d" % i) for i in range(20)]))

    source_root, target_root = ROOTS["A"], ROOTS["B"]
    monkeypatch.setenv("QUORUMQ_SOURCE_ACCESS_KEY", source_root.access_key)
    monkeypatch.setenv("QUORUMQ_SOURCE_SECRET_KEY", source_root.secret_key)
    log = tmp_path / "driver.log"
    driver = Driver([*replicator_args(primary, standby, topic, tmp_path / "checkpoint"), "--starting", "earliest",
                     "--spark-master", "local[1]", "--trigger-seconds", "0.5", "--config-seconds", "1",
                     "--target-ak", target_root.access_key, "--target-sk", target_root.secret_key], log)
    try:
        # The messages arrive through the Spark tasks' source and sink, signed on both sides.
        check_for(WAIT_S, 0.5, lambda: sum(queue_ends(standby, topic, 2, target_root)) == 20,
                  f"the messages on the standby ({log})")
        users, rules = access(primary)
        assert {name: held for name, held in access(standby)[0].items() if name in users} == users
        assert access(standby)[1] == rules, "every subject's rules as on the primary"
        with Blocking(Producer, standby["access_point"], credentials=alice) as producer:
            assert producer.send_batch(topic, [Message(b"from alice")])[0].ok, "alice's password holds there"

        admin(primary, "deleteUser", "-u", bob.access_key)
        admin(primary, "updateUser", "-u", alice.access_key, "-p", "alice-pw-2")
        check_for(WAIT_S, 0.5, lambda: access(standby)[0][alice.access_key][0] == "alice-pw-2",
                  "alice's new password on the standby")
        assert bob.access_key in access(standby)[0], "a user deleted on the primary stays by default"
        assert driver.stop() == 0
    finally:
        driver.kill()
    output = log.read_text()
    assert source_root.secret_key not in output and target_root.secret_key not in output, "no secret logged"

    changes = jobs.copy_config(Settings(primary["access_point"], standby["access_point"], (topic,), tmp_path, {},
                                        source_credentials=source_root, target_credentials=target_root,
                                        acl_deletes=True))
    assert [change.delete_users for change in changes[3].values()] == [(bob.access_key,)]
    assert bob.access_key not in access(standby)[0]
