"""Master/slave replication of the commit log: asyncio adapters around core/quorum.py (ack
counting) and core/replication_frames.py (the wire format)."""

from quorumq.replication.master import HandshakeRefused, ReplicationMaster
from quorumq.replication.slave import ReplicationSlave

__all__ = ["HandshakeRefused", "ReplicationMaster", "ReplicationSlave"]
