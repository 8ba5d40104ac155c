"""Where the controllers keep their state: ZooKeeper, through kazoo (blocking calls; the server
runs them in a worker thread).

    {root}/brokers/{brokerName}    one broker set (core/controller_state.BrokerSet, JSON)
    {root}/controllers/member-N    one ephemeral sequential node per running controller; its data
                                   is the controller's address, and the lowest N is the leader

Every write is a ZooKeeper transaction that (1) checks that this controller's member node still
exists, i.e. that its session, and so its leadership, is alive, and (2) creates, sets or deletes the
broker set's node at the version it read. A controller that lost its leadership, or that decided on
a state another controller changed since, writes nothing: a stale controller can never overwrite a
newer decision.
"""

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from quorumq.core.controller_state import BrokerSet

log = logging.getLogger("quorumq.controller")


class NotLeader(Exception):
    """This controller's ZooKeeper session no longer holds its member node."""


class ReplicaMetadata:
    def __init__(self, client: KazooClient, root: str) -> None:
        self._client = client
        self._root = root.rstrip("/")
        self._brokers = f"{self._root}/brokers"
        self.members_path = f"{self._root}/controllers"
        self.member_node: str | None = None

    def _path(self, broker_name: str) -> str:
        return f"{self._brokers}/{broker_name}"

    # Membership and leadership.

    def join(self, address: str) -> str:
        """Take part in the leader election; returns this controller's member node."""
        self._client.ensure_path(self._brokers)
        self.member_node = self._client.create(f"{self.members_path}/member-", address.encode(),
                                               ephemeral=True, sequence=True, makepath=True)
        return self.member_node

    def members(self, watch=None) -> list[tuple[str, str]]:
        """(node path, address) of every controller, the leader first."""
        children = sorted(self._client.get_children(self.members_path, watch=watch))
        members = []
        for child in children:
            path = f"{self.members_path}/{child}"
            try:
                data, _ = self._client.get(path)
            except NoNodeError:
                continue  # left between the listing and the read
            members.append((path, data.decode()))
        return members

    # Broker sets.

    def names(self) -> list[str]:
        try:
            return sorted(self._client.get_children(self._brokers))
        except NoNodeError:
            return []

    def read(self, broker_name: str) -> tuple[BrokerSet | None, int | None]:
        """The broker set and its node's version; (None, None) when it does not exist."""
        try:
            data, stat = self._client.get(self._path(broker_name))
        except NoNodeError:
            return None, None
        return BrokerSet.from_json(data), stat.version

    def commit(self, broker_name: str, version: int | None, broker_set: BrokerSet | None) -> bool:
        """Write the set decided from the state read at `version`; False when the node changed
        since (decide again on the new state); NotLeader when this controller lost its session."""
        if self.member_node is None:
            raise NotLeader("this controller has not joined the election")
        transaction = self._client.transaction()
        transaction.check(self.member_node, 0)
        path = self._path(broker_name)
        if version is None and broker_set is not None:
            transaction.create(path, broker_set.to_json())
        elif version is not None and broker_set is not None:
            transaction.set_data(path, broker_set.to_json(), version=version)
        elif version is not None:
            transaction.delete(path, version=version)
        else:
            return True  # nothing existed and nothing is to exist
        results = transaction.commit()
        if not any(isinstance(result, Exception) for result in results):
            return True
        if not isinstance(results[0], RolledBackError):  # the membership check itself failed
            raise NotLeader(f"member node {self.member_node} is gone: this controller's session ended")
        if isinstance(results[1], (BadVersionError, NodeExistsError, NoNodeError)):
            return False
        raise RuntimeError(f"unexpected ZooKeeper transaction results {results!r}")
