"""ACL 2.0's users and rules on the wire (cluster.proto AuthUser, Acl, AccessControl), checked as
client input where they come in, and the holder every server decides calls with."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from quorumq import limits
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import acl
from quorumq.core.acl import PolicyEntry
from quorumq.core.auth import User, UserStatus, UserType
from quorumq.errors import Error, QuorumqError


@dataclass
class Principals:
    """Who may call a server (users by access key) and what each Normal user may do (rules by
    subject). A server replaces the mappings as a whole when they change, so a call in flight sees
    one version of them."""

    users: Mapping[str, User]
    rules: Mapping[str, tuple[PolicyEntry, ...]] = field(default_factory=dict)
    inner_access_key: str | None = None  # innerClientAuthenticationCredentials: the cluster members


def user_type(text: str) -> UserType:
    return acl.parse_enum(UserType, text, "user type")


def user_status(text: str) -> UserStatus:
    return acl.parse_enum(UserStatus, text, "user status")


def check_password(password: str) -> str:
    if not password or len(password) > limits.PASSWORD_LENGTH_MAX:
        raise QuorumqError(Error.BAD_REQUEST, f"a password must be 1..{limits.PASSWORD_LENGTH_MAX} characters")
    return password


def user_from_pb(message: pb.AuthUser) -> User:
    """A whole user (createUser): a name, a password; Normal and enabled unless they say otherwise."""
    acl.check_user_name(message.username)
    return User(message.username, check_password(message.password),
                user_type(message.user_type) if message.user_type else UserType.NORMAL,
                user_status(message.user_status) if message.user_status else UserStatus.ENABLE)


def updated_user(old: User, message: pb.AuthUser) -> User:
    """updateUser: what the message sets, the rest as it was."""
    return User(old.username, check_password(message.password) if message.password else old.password,
                user_type(message.user_type) if message.user_type else old.user_type,
                user_status(message.user_status) if message.user_status else old.user_status)


def user_to_pb(user: User) -> pb.AuthUser:
    return pb.AuthUser(username=user.username, password=user.password, user_type=user.user_type.value,
                       user_status=user.user_status.value)


def entries_from_pb(entries: Iterable[pb.AclEntry]) -> tuple[PolicyEntry, ...]:
    parsed = []
    for entry in entries:
        if len(entry.source_ips) > limits.SOURCE_IPS_PER_ENTRY_MAX:
            raise QuorumqError(Error.BAD_REQUEST, f"{len(entry.source_ips)} source IPs in one entry, at most "
                                                  f"{limits.SOURCE_IPS_PER_ENTRY_MAX}")
        parsed.append(acl.entry_from_data({"resource": entry.resource, "actions": entry.actions,
                                           "sourceIps": entry.source_ips, "decision": entry.decision}))
    return tuple(parsed)


def entry_to_pb(entry: PolicyEntry) -> pb.AclEntry:
    data = acl.entry_data(entry)
    return pb.AclEntry(resource=data["resource"], actions=data["actions"], source_ips=data["sourceIps"],
                       decision=data["decision"])


def access_to_pb(users: Iterable[User], rules: Mapping[str, tuple[PolicyEntry, ...]]) -> pb.AccessControl:
    return pb.AccessControl(
        users=[user_to_pb(user) for user in users],
        acls=[pb.Acl(subject=subject, entries=[entry_to_pb(entry) for entry in entries])
              for subject, entries in rules.items()])


def access_from_pb(message: pb.AccessControl) -> tuple[dict[str, User], dict[str, tuple[PolicyEntry, ...]]]:
    """Users and rules another member sent (a master's metadata, a broker's registration), checked
    like client input: one that breaks a rule is BAD_REQUEST, and nothing of it is taken."""
    users = {}
    for user in message.users:
        parsed = user_from_pb(user)
        users[parsed.username] = parsed
    return users, {acl.parse_subject(rule.subject): entries_from_pb(rule.entries) for rule in message.acls}
