"""ACL 2.0's decision (core/acl.py): patterns, actions, source addresses, Deny over Allow, default
deny, Super users; the parsing of mqadmin's flags."""

import itertools

import pytest

from quorumq.core.acl import (
    Action,
    Decision,
    Need,
    PolicyEntry,
    Resource,
    ResourceType,
    authorize,
    entry_data,
    entry_from_data,
    merged,
    parse_actions,
    parse_resource,
    parse_source_ips,
    parse_subject,
)
from quorumq.core.auth import User, UserType
from quorumq.errors import Error, QuorumqError

ALICE = User("alice", "pw")
ROOT = User("root", "pw", UserType.SUPER)
TOPIC = Resource(ResourceType.TOPIC, "orders")


def entry(resource: str, actions: str, decision: str = "Allow", ips: tuple[str, ...] = ()) -> PolicyEntry:
    return PolicyEntry(parse_resource(resource), parse_actions(actions.split(",")), Decision(decision), ips)


def allowed(entries: list[PolicyEntry], need: Need, ip: str = "10.0.0.1", user: User = ALICE) -> bool:
    try:
        authorize(user, {"User:alice": tuple(entries)}, [need], ip)
        return True
    except QuorumqError as refused:
        assert refused.error is Error.NO_PERMISSION
        return False


@pytest.mark.parametrize("pattern, name, matches", [
    ("Topic:orders", "orders", True), ("Topic:orders", "orders2", False), ("Topic:ord*", "orders", True),
    ("Topic:x*", "orders", False), ("Topic:*", "orders", True), ("*", "orders", True),
    ("Group:orders", "orders", False), ("Group:*", "orders", False)])
def test_resource_patterns(pattern, name, matches):
    assert allowed([entry(pattern, "Pub")], Need(Resource(ResourceType.TOPIC, name), (Action.PUB,))) is matches


def test_nothing_is_allowed_without_a_rule_and_a_super_user_needs_none():
    need = Need(TOPIC, (Action.PUB,))
    assert not allowed([], need)
    assert not allowed([entry("Topic:orders", "Sub")], need)
    assert allowed([entry("Topic:orders", "All")], need)
    assert allowed([], need, user=ROOT)


def test_a_deny_wins_over_every_allow_whatever_the_order_or_pattern():
    need = Need(TOPIC, (Action.PUB,))
    rules = [entry("Topic:orders", "Pub"), entry("*", "All"), entry("Topic:ord*", "Pub", "Deny")]
    for order in itertools.permutations(rules):
        assert not allowed(list(order), need)


def test_one_of_the_actions_suffices_and_a_deny_of_one_leaves_the_other():
    route = Need(TOPIC, (Action.PUB, Action.SUB))
    assert allowed([entry("Topic:orders", "Sub")], route)
    assert allowed([entry("Topic:orders", "Sub"), entry("Topic:orders", "Pub", "Deny")], route)
    assert not allowed([entry("Topic:orders", "Pub,Sub", "Deny"), entry("*", "All")], route)


def test_every_need_must_be_met():
    needs = [Need(TOPIC, (Action.SUB,)), Need(Resource(ResourceType.GROUP, "g"), (Action.SUB,))]
    with pytest.raises(QuorumqError, match="Group:g"):
        authorize(ALICE, {"User:alice": (entry("Topic:orders", "Sub"),)}, needs, "10.0.0.1")


@pytest.mark.parametrize("ip, ok", [("10.0.0.1", True), ("10.1.2.3", True), ("192.168.0.1", False), ("", False)])
def test_source_addresses(ip, ok):
    assert allowed([entry("Topic:orders", "Pub", ips=("10.0.0.0/8",))], Need(TOPIC, (Action.PUB,)), ip) is ok


def test_a_deny_from_another_address_does_not_apply():
    rules = [entry("Topic:orders", "Pub"), entry("Topic:orders", "Pub", "Deny", ("192.168.0.0/16",))]
    assert allowed(rules, Need(TOPIC, (Action.PUB,)), "10.0.0.1")
    assert not allowed(rules, Need(TOPIC, (Action.PUB,)), "192.168.3.4")


@pytest.mark.parametrize("text", ["Topic", "Queue:x", "Topic:", "Topic:a b", "Topic:*x", ""])
def test_bad_resources(text):
    with pytest.raises(QuorumqError) as refused:
        parse_resource(text)
    assert refused.value.error is Error.BAD_REQUEST


def test_bad_actions_subjects_and_addresses():
    for parse, value in [(parse_actions, ["Publish"]), (parse_actions, []), (parse_subject, "alice"),
                         (parse_subject, "User:a b"), (parse_source_ips, ["10.0.0.300"])]:
        with pytest.raises(QuorumqError) as refused:
            parse(value)
        assert refused.value.error is Error.BAD_REQUEST


def test_names_in_any_case_and_entries_round_trip():
    parsed = entry("topic:orders", "pub,SUB", ips=("10.0.0.0/8",))
    assert parsed.actions == {Action.PUB, Action.SUB} and str(parsed.resource) == "Topic:orders"
    assert entry_from_data(entry_data(parsed)) == parsed


def test_an_entry_replaces_the_one_of_its_resource():
    old = (entry("Topic:a", "Pub"), entry("Topic:b", "Sub"))
    assert merged(old, [entry("Topic:a", "Sub", "Deny")]) == (entry("Topic:a", "Sub", "Deny"), entry("Topic:b", "Sub"))
