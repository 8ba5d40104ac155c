"""Where a new consumer group starts on a queue: offset 0 while the queue's first message is in
the commit log's in-memory tail (RocketMQ's initPopOffsetByCheckMsgInMem), else at the end."""

from quorumq.core.group_start import in_memory, starts_at_zero

GIB = 1024**3


def test_in_memory_is_the_newest_ratio_of_physical_memory_worth_of_commit_log():
    memory = 10 * GIB  # 40 % of it: the newest 4 GiB of the log
    end = 100 * GIB
    assert in_memory(end - 4 * GIB, end, memory, 40)
    assert not in_memory(end - 4 * GIB - 1, end, memory, 40)
    assert in_memory(end - 1, end, memory, 0) is False and in_memory(end, end, memory, 0)
    assert in_memory(0, end, memory, 100) is False and in_memory(0, 10 * GIB, memory, 100)


def test_a_new_group_starts_at_zero_only_with_the_check_on_and_the_first_message_in_memory():
    memory, end = 10 * GIB, 5 * GIB
    assert starts_at_zero(True, 2 * GIB, end, memory, 40)
    assert not starts_at_zero(False, 2 * GIB, end, memory, 40), "initPopOffsetByCheckMsgInMem=false: the end"
    assert not starts_at_zero(True, None, end, memory, 40), "the queue's first message is gone, or none came"
    assert not starts_at_zero(True, 0, end, memory, 40), "the first message is older than the in-memory tail"
