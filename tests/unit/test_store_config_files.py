"""The small JSON stores under <root>/config and the atomic replace they rely on."""

import pytest

from quorumq.core.message_types import TopicMessageType
from quorumq.errors import Error, QuorumqError
from quorumq.store import ConsumerOffsets, TopicConfig, TopicConfigs, write_atomically
from quorumq.store.keyed_log import encode_record


def test_write_atomically_replaces_whole_files(tmp_path):
    path = tmp_path / "f.json"
    write_atomically(path, b"one")
    write_atomically(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temporary file left behind


def test_consumer_offsets_survive_a_restart(tmp_path):
    offsets = ConsumerOffsets(tmp_path)
    offsets.load()
    assert offsets.get("g", "T", 0) is None and not offsets.persist()
    offsets.set("g", "T", 0, 10)
    offsets.set("g", "T", 3, 7)
    offsets.set("h", "U", 1, 0)
    assert offsets.persist() and not offsets.persist()
    offsets.set("g", "T", 0, 10)  # unchanged: nothing to write
    assert not offsets.persist()
    again = ConsumerOffsets(tmp_path)
    again.load()
    assert (again.get("g", "T", 0), again.get("g", "T", 3), again.get("h", "U", 1)) == (10, 7, 0)
    assert (tmp_path / "config" / "consumerOffset.json").exists()
    with pytest.raises(QuorumqError):
        again.set("g", "T", 0, -1)


def test_consumer_offsets_refuse_a_damaged_file(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.json").write_text('{"g": ')
    with pytest.raises(QuorumqError) as raised:
        ConsumerOffsets(tmp_path).load()
    assert raised.value.error is Error.STORE_CORRUPTED


def test_topic_configs_persist_every_change(tmp_path):
    topics = TopicConfigs(tmp_path)
    topics.load()
    topics.put(TopicConfig("orders", 8, 8))
    topics.put(TopicConfig("audit", 4, 2, perm=4))
    again = TopicConfigs(tmp_path)
    again.load()
    assert again.all() == [TopicConfig("audit", 4, 2, 4), TopicConfig("orders", 8, 8, 6)]
    assert again.delete("orders") and not again.delete("orders")
    third = TopicConfigs(tmp_path)
    third.load()
    assert third.get("orders") is None and third.get("audit").write_queue_nums == 2
    assert [path.name for path in (tmp_path / "config").iterdir()] == ["topics.log"]


def test_topic_configs_keep_their_message_type_and_older_logs_load_as_normal(tmp_path):
    topics = TopicConfigs(tmp_path)
    topics.load()
    topics.put(TopicConfig("orders", 8, 8, message_type=TopicMessageType.FIFO))
    with open(topics.path, "ab") as log:  # a record written before message types
        log.write(encode_record({"audit": {"name": "audit", "read_queue_nums": 4, "write_queue_nums": 2, "perm": 6}}))
    again = TopicConfigs(tmp_path)
    again.load()
    assert again.all() == [TopicConfig("audit", 4, 2, 6, TopicMessageType.NORMAL),
                           TopicConfig("orders", 8, 8, 6, TopicMessageType.FIFO)]


def test_topic_config_limits():
    bad_configs = (("", 1, 1, 6), ("t", 0, 1, 6), ("t", 1, 2000, 6), ("t", 1, 1, 9))
    for name, read_queues, write_queues, perm in bad_configs:
        with pytest.raises(QuorumqError):
            TopicConfig(name, read_queues, write_queues, perm)


def test_consumer_offsets_of_a_deleted_topic_are_forgotten(tmp_path):
    offsets = ConsumerOffsets(tmp_path)
    offsets.set("g", "T", 0, 5)
    offsets.set("g", "U", 0, 6)
    offsets.set("h", "T", 1, 7)
    assert offsets.topics("g") == ["T", "U"] and offsets.topics("nobody") == []
    offsets.persist()
    offsets.delete_topic("T")
    assert offsets.persist()
    again = ConsumerOffsets(tmp_path)
    again.load()
    assert again.topics("g") == ["U"] and again.topics("h") == [] and again.get("h", "T", 1) is None


def test_consumer_offsets_that_cannot_be_written_are_a_clear_error_and_written_later(tmp_path):
    offsets = ConsumerOffsets(tmp_path)
    offsets.set("g", "T", 0, 7)
    (tmp_path / "config").write_text("a file where the directory should be")
    with pytest.raises(QuorumqError) as raised:
        offsets.persist()
    assert raised.value.error is Error.INTERNAL_ERROR and "consumer offsets not written" in str(raised.value)
    (tmp_path / "config").unlink()
    assert offsets.persist()  # still marked changed: the next persist writes it
    reloaded = ConsumerOffsets(tmp_path)
    reloaded.load()
    assert reloaded.get("g", "T", 0) == 7
