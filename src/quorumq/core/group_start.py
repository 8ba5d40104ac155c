"""Where a consumer group without an offset on a queue starts reading it: RocketMQ 5's rule for
pop consumers (the official 5.x clients receive by pop; PopMessageProcessor.getInitOffset).

With initPopOffsetByCheckMsgInMem (default true) a new group reads a queue from offset 0 when the
queue still holds its first message (nothing of it was deleted) and that message is still in
memory. RocketMQ asks the page cache (mincore) whether its bytes are resident; quorumq uses the
estimate RocketMQ's reads use (accessMessageInMemoryMaxRatio): a message is in memory when it lies
within the newest ratio percent of physical memory's worth of commit log. Otherwise the group
starts at the end of the queue, as of its first contact with the broker.
"""


def in_memory(position: int, log_end: int, memory_bytes: int, ratio_percent: int) -> bool:
    """Whether the record at commit-log offset `position` lies in the log's in-memory tail."""
    return log_end - position <= memory_bytes * ratio_percent // 100


def starts_at_zero(check_in_memory: bool, head_position: int | None, log_end: int, memory_bytes: int,
                   ratio_percent: int) -> bool:
    """Whether a new group reads the queue from offset 0; `head_position` is where the queue's
    message at offset 0 lies in the commit log, None when the queue no longer (or never) held one."""
    return check_in_memory and head_position is not None and in_memory(head_position, log_end, memory_bytes,
                                                                       ratio_percent)
