"""The broker's ACL 2.0 users and rules (createUser, createAcl, ...): kept in two keyed logs of its
store (readable by its owner alone, as they hold passwords), copied by its slaves with the rest of
its metadata, and answered as a topic update is (MetadataSync.changed): on a controller-mode master
with allAckInSyncStateSet once every SyncStateSet member holds the change, so that it survives a
failover.

The users of the config (initAuthenticationUser, innerClientAuthenticationCredentials) are not
stored: every process knows them from its config, and no call changes them."""

from pathlib import Path

from quorumq import limits
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core import acl
from quorumq.core.acl import PolicyEntry
from quorumq.core.auth import User
from quorumq.core.quorum import BrokerRole
from quorumq.errors import Error, QuorumqError
from quorumq.protocol.access import (
    Principals,
    access_from_pb,
    access_to_pb,
    entries_from_pb,
    updated_user,
    user_from_pb,
    user_status,
    user_type,
)
from quorumq.protocol.authentication import configured_principals
from quorumq.store import KeyedLog

USERS_FILE_NAME = "users.log"
ACLS_FILE_NAME = "acls.log"


def _user_data(user: User) -> dict:
    return {"username": user.username, "password": user.password, "userType": user.user_type.value,
            "userStatus": user.user_status.value}


def _user(data: dict) -> User:
    return User(data["username"], data["password"], user_type(data["userType"]), user_status(data["userStatus"]))


class Access:
    def __init__(self, broker, root: Path) -> None:  # the Broker (broker/broker.py) this is a part of
        self._broker = broker
        self.principals = configured_principals(broker.config)
        self._configured = self.principals.users
        directory = Path(root) / "config"
        self._users: KeyedLog[User] = KeyedLog(
            directory / USERS_FILE_NAME, "users", encode=_user_data, decode=_user, mode=0o600)
        self._rules: KeyedLog[tuple[PolicyEntry, ...]] = KeyedLog(
            directory / ACLS_FILE_NAME, "acl rules", encode=lambda entries: [acl.entry_data(e) for e in entries],
            decode=lambda data: tuple(acl.entry_from_data(entry) for entry in data), mode=0o600)

    def load(self) -> None:
        self._users.load()
        self._rules.load()
        self._publish()

    def _publish(self) -> None:
        """A new view for the checks (a call in flight keeps the one it started with)."""
        self.principals = Principals({**self._users.entries, **self._configured}, dict(self._rules.entries),
                                     self.principals.inner_access_key)

    def to_pb(self) -> pb.AccessControl:
        return access_to_pb(self._users.entries.values(), self._rules.entries)

    def adopt(self, message: pb.AccessControl) -> None:
        """A slave takes its master's users and rules: what its master lacks goes."""
        users, rules = access_from_pb(message)
        self._users.update(users, [name for name in self._users.entries if name not in users])
        self._rules.update(rules, [subject for subject in self._rules.entries if subject not in rules])
        self._publish()

    # Changes (BrokerAdmin), on a master.

    async def create_user(self, message: pb.AuthUser) -> None:
        user = user_from_pb(message)
        self._check_changeable(user.username)
        if user.username in self._users:
            raise QuorumqError(Error.BAD_REQUEST, f"user {user.username!r} exists: updateUser changes it")
        if len(self._users) >= limits.USERS_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"{limits.USERS_MAX} users exist, the most a broker keeps")
        await self._change(lambda: self._users.put(user.username, user), f"creation of user {user.username}")

    async def update_user(self, message: pb.AuthUser) -> None:
        acl.check_user_name(message.username)
        self._check_changeable(message.username)
        user = updated_user(self._existing(message.username), message)
        await self._change(lambda: self._users.put(user.username, user), f"update of user {user.username}")

    async def delete_user(self, username: str) -> None:
        acl.check_user_name(username)
        self._check_changeable(username)
        self._existing(username)
        subject = acl.subject(username)
        await self._change(lambda: (self._users.delete(username), self._rules.delete(subject)),
                           f"deletion of user {username}")

    async def put_rules(self, message: pb.Acl) -> None:
        """createAcl and updateAcl: each entry replaces the subject's for its resource pattern."""
        subject = acl.parse_subject(message.subject)
        self._existing(subject[len(acl.SUBJECT_PREFIX):])
        if not message.entries:
            raise QuorumqError(Error.BAD_REQUEST, "a rule needs at least one entry: a resource, actions, a decision")
        entries = acl.merged(self._rules.get(subject) or (), entries_from_pb(message.entries))
        if len(entries) > limits.ACL_ENTRIES_PER_SUBJECT_MAX:
            raise QuorumqError(Error.TOO_MANY_REQUESTS, f"{subject} would have {len(entries)} entries, at most "
                                                        f"{limits.ACL_ENTRIES_PER_SUBJECT_MAX}")
        await self._change(lambda: self._rules.put(subject, entries), f"rules of {subject}")

    async def delete_rules(self, message: pb.AclRequest) -> None:
        """deleteAcl: the subject's entries for the resource patterns named, or all of them."""
        subject = acl.parse_subject(message.subject)
        old = self._rules.get(subject)
        if old is None:
            raise QuorumqError(Error.BAD_REQUEST, f"{subject} has no rules")
        gone = {acl.parse_resource(resource) for resource in message.resources}
        kept = tuple(entry for entry in old if gone and entry.resource not in gone)
        await self._change(lambda: self._rules.put(subject, kept) if kept else self._rules.delete(subject),
                           f"rules of {subject}")

    def _check_changeable(self, username: str) -> None:
        if username in self._configured:
            raise QuorumqError(Error.BAD_REQUEST, f"user {username!r} is the config's (initAuthenticationUser or "
                                                  f"innerClientAuthenticationCredentials): change it there")

    def _existing(self, username: str) -> User:
        user = self._users.get(username)
        if user is None:
            raise QuorumqError(Error.BAD_REQUEST, f"no user {username!r}")
        return user

    async def _change(self, write, what: str) -> None:
        broker = self._broker
        if broker.role is BrokerRole.SLAVE:
            raise QuorumqError(Error.SERVICE_NOT_AVAILABLE, f"{broker.address} is a slave: make the {what} on "
                                                            f"its master, which its slaves copy")
        write()
        self._publish()
        await broker.metadata_sync.changed(what)
