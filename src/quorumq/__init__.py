"""quorumq: a message broker cluster that speaks the Apache RocketMQ 5 client protocol."""

import os

# grpcio's fork support restarts its poller thread in a child forked while a channel is in use, and
# about one such child in fifty dies before its exec (grpc/grpc#43055). quorumq's processes fork
# with a preexec_fn beside live channels (the replicator's Spark gateway, the processes `quorumq up`
# starts) and never use gRPC in a forked child, so fork support is off before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

__version__ = "0.1.0"
