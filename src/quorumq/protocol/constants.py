"""Names RocketMQ's protocol fixes, shared by the name server, the brokers and the store."""

# MixAll.MASTER_ID: the broker id clients read and send through.
MASTER_ID = 0

# RocketMQ's PermName bits: 4 readable, 2 writable, 1 inherited.
PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE

# quorumq: a v5 SendMessage with this header set to "1" goes to the queue ids its messages name.
EXPLICIT_QUEUE_HEADER = "x-quorumq-explicit-queue"
