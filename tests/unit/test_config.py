import logging

import pytest

from quorumq.config import Config, Kind, read_properties, write_properties
from quorumq.errors import Error, QuorumqError


def test_properties_forms():
    text = "# comment\n! also\na=1\nb : 2\nc 3\nlong=x\\\n   y\nempty=\nd=a=b\n"
    assert read_properties(text) == {"a": "1", "b": "2", "c": "3", "long": "xy", "empty": "", "d": "a=b"}


def test_unknown_key_is_an_error_naming_it():
    with pytest.raises(QuorumqError) as caught:
        Config(Kind.BROKER, {"listenPort": "1", "brokerNmae": "x"})
    assert caught.value.error is Error.CONFIG_INVALID
    assert "brokerNmae" in str(caught.value)


def test_rocketmq_keys_quorumq_does_not_use_are_warned_once(caplog):
    with caplog.at_level(logging.WARNING):
        config = Config(Kind.BROKER, {"sendMessageThreadPoolNums": "4", "useEpollNativeSelector": "true"})
    warnings = [r for r in caplog.records if "does not use" in r.getMessage()]
    assert len(warnings) == 1
    assert "sendMessageThreadPoolNums" in warnings[0].getMessage()
    assert config["brokerName"] == "broker-a"


def test_key_of_another_kind_is_only_warned():
    config = Config(Kind.NAMESRV, {"brokerName": "x", "listenPort": "9876"})
    assert config["listenPort"] == 9876


def test_bad_values_are_rejected():
    for key, value in (("brokerRole", "MASTER"), ("listenPort", "x"), ("autoCreateTopicEnable", "yes"),
                       ("deleteWhen", "25"), ("maxMessageSize", "0"), ("accessMessageInMemoryMaxRatio", "101"),
                       ("initPopOffsetByCheckMsgInMem", "1"), ("brokerName", "broker.a"),
                       ("brokerClusterName", "my cluster")):
        with pytest.raises(QuorumqError):
            Config(Kind.BROKER, {key: value})


def test_segment_must_hold_largest_message():
    with pytest.raises(QuorumqError) as caught:
        Config(Kind.BROKER, {"mappedFileSizeCommitLog": str(1024 * 1024), "maxMessageSize": str(4 * 1024 * 1024)})
    assert "mappedFileSizeCommitLog" in str(caught.value)


def test_live_update_only_for_live_keys_and_rolled_back_when_invalid():
    config = Config(Kind.BROKER, {})
    config.update_live("fileReservedTime", "1")
    assert config["fileReservedTime"] == 1
    with pytest.raises(QuorumqError):
        config.update_live("listenPort", "1")
    with pytest.raises(QuorumqError):
        config.update_live("defaultTopicQueueNums", "100000")
    assert config["defaultTopicQueueNums"] == 8


def test_replication_keys_have_rocketmq_defaults_and_the_quorum_keys_are_live():
    config = Config(Kind.BROKER, {})
    assert (config["totalReplicas"], config["inSyncReplicas"], config["minInSyncReplicas"]) == (1, 1, 1)
    assert config["enableAutoInSyncReplicas"] is False and config["enableSlaveActingMaster"] is False
    assert config["haMaxGapNotInSync"] == 256 * 1024 * 1024 and config["slaveTimeout"] == 3000
    for key, value in (("inSyncReplicas", "2"), ("minInSyncReplicas", "2"), ("enableAutoInSyncReplicas", "true"),
                       ("haMaxGapNotInSync", "4096"), ("slaveTimeout", "500")):
        config.update_live(key, value)
        assert config.as_strings()[key] == value
    with pytest.raises(QuorumqError):
        config.update_live("enableSlaveActingMaster", "true")


def test_replication_values_are_checked():
    for values in ({"brokerRole": "SLAVE"}, {"brokerRole": "SLAVE", "brokerId": "0"}, {"brokerId": "1"},
                   {"inSyncReplicas": "0"}, {"minInSyncReplicas": "0"}, {"haMaxGapNotInSync": "0"},
                   {"haTransferBatchSize": str(64 * 1024 * 1024)},
                   {"haSendHeartbeatInterval": "5000", "haHousekeepingInterval": "5000"},
                   {"asyncLearner": "true"},  # a learner needs a controller's SyncStateSet
                   {"asyncLearner": "true", "enableControllerMode": "true", "controllerAddr": "127.0.0.1:1",
                    "brokerElectionPriority": "0"}):  # a learner is never elected: it cannot be preferred
        with pytest.raises(QuorumqError) as caught:
            Config(Kind.BROKER, values)
        assert caught.value.error is Error.CONFIG_INVALID
    assert Config(Kind.BROKER, {"brokerRole": "SLAVE", "brokerId": "2"})["brokerId"] == 2
    config = Config(Kind.BROKER, {})
    with pytest.raises(QuorumqError):
        config.update_live("inSyncReplicas", "0")
    assert config["inSyncReplicas"] == 1


def test_a_written_config_is_readable_by_its_owner_alone_as_it_may_hold_secrets(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("old=1\n")
    path.chmod(0o644)  # written before, by hand: rewritten, it is closed too
    values = {"authenticationEnabled": "true", "initAuthenticationUser": '{"username": "a", "password": "s"}'}
    write_properties(path, values)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_properties(path.read_text()) == values
