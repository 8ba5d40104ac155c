"""Authorization as RocketMQ 5.3's ACL 2.0 has it: rules per subject (`User:name`), each an entry of
a resource pattern, actions, optional source addresses and a decision, and the decision for one
request.

A request needs, for each resource it touches, one of a set of actions (a route query needs Pub
or Sub on its topic). An action on a resource is allowed when an entry of the user's rules that
matches the resource, the action (or All) and the caller's address allows it and none such denies
it: a Deny wins over every Allow, whatever their patterns, and what no entry allows is denied. A
Super user may do everything.

Pure: the rules, the user and the caller's address are passed in."""

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from quorumq.core.auth import User, UserType
from quorumq.core.message_rules import check_name
from quorumq.errors import Error, QuorumqError


class ResourceType(Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"


class Action(Enum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"


class Decision(Enum):
    ALLOW = "Allow"
    DENY = "Deny"


ANY = "*"  # a pattern alone: every name (and, as the whole resource, every type)
SUBJECT_PREFIX = "User:"


@dataclass(frozen=True)
class Resource:
    """What a request touches: a type and a name."""

    type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.value}:{self.name}"


@dataclass(frozen=True)
class ResourcePattern:
    """What an entry covers: `*`, `Type:*`, `Type:name` or `Type:prefix*` (type None: every type)."""

    type: ResourceType | None
    name: str  # ANY, a literal name, or a prefix ending in ANY

    def matches(self, resource: Resource) -> bool:
        if self.type is not None and self.type is not resource.type:
            return False
        if self.name.endswith(ANY):
            return resource.name.startswith(self.name[:-1])
        return resource.name == self.name

    def __str__(self) -> str:
        return ANY if self.type is None else f"{self.type.value}:{self.name}"


@dataclass(frozen=True)
class PolicyEntry:
    resource: ResourcePattern
    actions: frozenset[Action]
    decision: Decision
    source_ips: tuple[str, ...] = ()  # addresses or CIDR blocks; none: any address

    def covers(self, resource: Resource, action: Action, caller_ip: str) -> bool:
        return ((action in self.actions or Action.ALL in self.actions) and self.resource.matches(resource)
                and (not self.source_ips or _address_in(caller_ip, self.source_ips)))


@dataclass(frozen=True)
class Need:
    """One of `actions` on `resource`."""

    resource: Resource
    actions: tuple[Action, ...]


def _address_in(caller_ip: str, networks: Iterable[str]) -> bool:
    try:
        address = ipaddress.ip_address(caller_ip)
    except ValueError:  # a caller on a unix socket, or an unknown peer: no address matches
        return False
    return any(address in ipaddress.ip_network(network, strict=False) for network in networks)


def forbidden(detail: str) -> QuorumqError:
    return QuorumqError(Error.NO_PERMISSION, detail)


def allowed(entries: Iterable[PolicyEntry], resource: Resource, action: Action, caller_ip: str) -> bool:
    covering = [entry.decision for entry in entries if entry.covers(resource, action, caller_ip)]
    return bool(covering) and Decision.DENY not in covering


def authorize(user: User, rules: Mapping[str, tuple[PolicyEntry, ...]], needs: Iterable[Need],
              caller_ip: str) -> None:
    """Raises FORBIDDEN unless `user` may do every need (one of its actions each)."""
    if user.user_type is UserType.SUPER:
        return
    entries = rules.get(subject(user.username), ())
    for need in needs:
        if not any(allowed(entries, need.resource, action, caller_ip) for action in need.actions):
            wanted = " or ".join(action.value for action in need.actions)
            raise forbidden(f"user {user.username!r} may not {wanted} on {need.resource} from {caller_ip}")


def subject(username: str) -> str:
    return SUBJECT_PREFIX + username


# Parsing, as mqadmin's flags write them (createAcl -s User:u -r Topic:t,Group:g* -a Pub,Sub -d Allow
# -i 10.0.0.0/8).

def _bad(detail: str) -> QuorumqError:
    return QuorumqError(Error.BAD_REQUEST, detail)


def parse_subject(text: str) -> str:
    """`User:name`, the only subject type; the name a valid user name."""
    if not text.startswith(SUBJECT_PREFIX):
        raise _bad(f"subject {text!r} must be {SUBJECT_PREFIX}NAME")
    check_user_name(text[len(SUBJECT_PREFIX):])
    return text


def check_user_name(name: str) -> None:
    check_name(name, Error.BAD_REQUEST, "user name")


def parse_resource(text: str) -> ResourcePattern:
    text = text.strip()
    if text == ANY:
        return ResourcePattern(None, ANY)
    kind, colon, name = text.partition(":")
    types = {t.value.lower(): t for t in ResourceType}
    if not colon or kind.lower() not in types:
        raise _bad(f"resource {text!r} must be *, or TYPE:NAME with TYPE one of "
                   f"{', '.join(t.value for t in ResourceType)} and NAME a name, NAME* or *")
    literal = name[:-1] if name.endswith(ANY) else name
    if literal:
        check_name(literal, Error.BAD_REQUEST, f"{kind} name")
    elif name != ANY:
        raise _bad(f"resource {text!r} has no name")
    return ResourcePattern(types[kind.lower()], name)


E = TypeVar("E", bound=Enum)


def parse_enum(enum: type[E], text: str, what: str) -> E:
    """A member by its value, in any case."""
    members = {member.value.lower(): member for member in enum}
    try:
        return members[text.strip().lower()]
    except KeyError:
        raise _bad(f"{what} {text!r} must be one of {', '.join(m.value for m in enum)}") from None


def parse_actions(texts: Iterable[str]) -> frozenset[Action]:
    actions = frozenset(parse_enum(Action, text, "action") for text in texts if text.strip())
    if not actions:
        raise _bad("a rule needs at least one action")
    return actions


def parse_decision(text: str) -> Decision:
    return parse_enum(Decision, text, "decision")


def parse_source_ips(texts: Iterable[str]) -> tuple[str, ...]:
    networks = []
    for text in texts:
        text = text.strip()
        if not text:
            continue
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise _bad(f"source IP {text!r} must be an address or a CIDR block") from None
        networks.append(text)
    return tuple(networks)


def entry_data(entry: PolicyEntry) -> dict:
    """An entry as JSON data, in RocketMQ's field names."""
    return {"resource": str(entry.resource), "actions": sorted(a.value for a in entry.actions),
            "sourceIps": list(entry.source_ips), "decision": entry.decision.value}


def entry_from_data(data: dict) -> PolicyEntry:
    return PolicyEntry(parse_resource(data["resource"]), parse_actions(data["actions"]),
                       parse_decision(data["decision"]), parse_source_ips(data.get("sourceIps", ())))


def merged(old: Iterable[PolicyEntry], new: Iterable[PolicyEntry]) -> tuple[PolicyEntry, ...]:
    """A subject's entries after createAcl/updateAcl: an entry for a resource pattern replaces the
    one it had, the others stay."""
    entries = {entry.resource: entry for entry in old}
    entries.update({entry.resource: entry for entry in new})
    return tuple(entries.values())
