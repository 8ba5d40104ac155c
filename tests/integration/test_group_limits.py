"""Consumer groups per broker are bounded (GROUPS_MAX): past it a new group, whether a consumer's
first contact or an operator's AddConsumerGroups, is refused with TOO_MANY_REQUESTS while known
groups keep working; one AddConsumerGroups request carries at most GROUPS_PER_REQUEST_MAX groups.
A slave copies every group its master holds. Each new group is one append to
config/consumerGroups.log, so reaching the bound takes seconds."""

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as v5
from rocketmq.grpc_protocol import service_pb2 as v5s
from rocketmq.grpc_protocol import service_pb2_grpc as v5_grpc

from harness import LocalCluster, check_for
from quorumq import limits
from quorumq.cluster import cluster_pb2 as pb
from quorumq.cluster import cluster_pb2_grpc as pb_grpc
from quorumq.errors import Error
from quorumq.grpc_errors import sent_error

# Every group's name at the longest (127 bytes): the metadata a slave polls then holds 8 MB of names.
LONG = "x" * 100
# The admin channel reads any answer, however many groups it carries.
OPTIONS = [("grpc.max_receive_message_length", -1)]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """A master and its slave."""
    cluster = LocalCluster(tmp_path_factory.mktemp("group-limits"), replicas=2)
    try:
        brokers = sorted((p for p in cluster.start()["processes"] if p["kind"] == "broker"),
                         key=lambda p: p["broker_id"])
        with grpc.insecure_channel(brokers[0]["address"], options=OPTIONS) as master, \
                grpc.insecure_channel(brokers[1]["address"], options=OPTIONS) as slave:
            yield master, slave
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def channel(replicas):
    return replicas[0]


def groups_of(channel) -> dict[str, int]:
    return pb_grpc.BrokerAdminStub(channel).GetMetadata(pb.MetadataRequest(), timeout=10).groups


def add_groups(channel, names):
    pb_grpc.BrokerAdminStub(channel).AddConsumerGroups(pb.ConsumerGroups(groups=dict.fromkeys(names, 1)), timeout=30)


def refusal(call) -> tuple[grpc.StatusCode, int]:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value.code(), sent_error(refused.value.trailing_metadata()).code


def heartbeat(channel, group) -> int:
    answer = v5_grpc.MessagingServiceStub(channel).Heartbeat(v5s.HeartbeatRequest(
        group=v5.Resource(name=group), client_type=v5.ClientType.SIMPLE_CONSUMER), timeout=10)
    return answer.status.code


def test_one_request_carries_a_bounded_number_of_groups(channel):
    too_many = [f"batch-{index}" for index in range(limits.GROUPS_PER_REQUEST_MAX + 1)]
    assert refusal(lambda: add_groups(channel, too_many)) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                              Error.BAD_REQUEST.code)
    assert "batch-0" not in groups_of(channel)
    add_groups(channel, too_many[:-1])


def test_groups_past_the_bound_are_refused_and_known_ones_keep_working(replicas):
    master, slave = replicas
    assert heartbeat(master, "known-group") == v5.Code.OK
    missing = limits.GROUPS_MAX - len(groups_of(master))
    names = [f"filler-{index}-{LONG}" for index in range(missing)]
    for start in range(0, missing, limits.GROUPS_PER_REQUEST_MAX):
        add_groups(master, names[start:start + limits.GROUPS_PER_REQUEST_MAX])

    assert refusal(lambda: add_groups(master, ["one-too-many"])) == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                                     Error.TOO_MANY_REQUESTS.code)
    assert heartbeat(master, "one-too-many") == v5.Code.TOO_MANY_REQUESTS
    assert heartbeat(master, "known-group") == v5.Code.OK
    add_groups(master, ["known-group", names[0]])  # known groups are no new ones
    assert len(groups_of(master)) == limits.GROUPS_MAX
    check_for(20, 0.2, lambda: len(groups_of(slave)) == limits.GROUPS_MAX, "the slave holding every group")
