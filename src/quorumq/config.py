"""Config files in Java-properties form with RocketMQ's key names.

Every key quorumq uses is declared once in `KEYS` with its type, default, the process kinds that
read it and whether a running broker applies a change live. Keys RocketMQ knows that quorumq does
not use are accepted with one warning; any other key is an error naming it.
"""

import logging
import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable

from quorumq import limits
from quorumq.core import auth
from quorumq.core.message_rules import check_name
from quorumq.core.retention import parse_delete_when
from quorumq.errors import Error, QuorumqError

log = logging.getLogger(__name__)


class Kind(str, Enum):
    NAMESRV = "namesrv"
    BROKER = "broker"
    CONTROLLER = "controller"
    PROXY = "proxy"


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {text!r}")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return text

    return parse


@dataclass(frozen=True)
class Key:
    parse: Callable[[str], Any]
    default: Any
    kinds: frozenset[Kind]
    live: bool = False  # a running broker applies a change without a restart
    secret: bool = False  # its value is never shown (GetBrokerConfig, GetControllerConfig)


B = frozenset({Kind.BROKER})
N = frozenset({Kind.NAMESRV})
C = frozenset({Kind.CONTROLLER})
BN = frozenset({Kind.BROKER, Kind.NAMESRV})
BNC = frozenset({Kind.BROKER, Kind.NAMESRV, Kind.CONTROLLER})
BP = frozenset({Kind.BROKER, Kind.PROXY})
EVERY = frozenset(Kind)

KEYS: dict[str, Key] = {
    # Identity and addresses.
    "brokerClusterName": Key(str, "DefaultCluster", B),
    "brokerName": Key(str, "broker-a", B),
    "brokerId": Key(int, 0, B),
    "brokerRole": Key(_choice("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"), "ASYNC_MASTER", B),
    "namesrvAddr": Key(str, "", BP),
    "listenPort": Key(int, 10911, BNC),
    "grpcServerPort": Key(int, 8081, frozenset({Kind.PROXY})),  # RocketMQ's proxy: its v5 port
    # quorumq: several proxies share grpcServerPort (SO_REUSEPORT; the kernel spreads connections).
    "grpcServerReusePort": Key(_bool, False, frozenset({Kind.PROXY})),
    # RocketMQ's producer batching key, here a proxy's: the ms a merged broker call waits for more
    # sends while its line is under heavy concurrent load (core/send_batches.py linger_s); 0: never.
    "batchMaxDelayMs": Key(int, limits.PROXY_BATCH_MAX_DELAY_MS_DEFAULT, frozenset({Kind.PROXY})),
    "haListenPort": Key(int, 10912, B),
    "bindAddress": Key(str, "127.0.0.1", EVERY),  # quorumq: where to listen
    "brokerIP1": Key(str, "127.0.0.1", B),  # the host advertised to clients
    "brokerIP2": Key(str, "", B),  # the host slaves replicate from (haListenPort); empty: brokerIP1
    "advertisedAddress": Key(str, "", B),  # quorumq: host:port for clients when a proxy sits in front
    "brokerPermission": Key(int, 6, B, live=True),
    "registerNameServerPeriod": Key(int, 10_000, B),
    # Store.
    "storePathRootDir": Key(str, "store", B),
    "mappedFileSizeCommitLog": Key(int, limits.COMMIT_LOG_SEGMENT_BYTES_DEFAULT, B),
    "flushDiskType": Key(_choice("ASYNC_FLUSH", "SYNC_FLUSH"), "ASYNC_FLUSH", B),
    "flushIntervalCommitLog": Key(int, 500, B),
    "syncFlushTimeout": Key(int, 5000, B, live=True),
    "maxMessageSize": Key(int, limits.MESSAGE_BODY_BYTES_DEFAULT, BP, live=True),
    "flushConsumerOffsetInterval": Key(int, 5000, B, live=True),
    "fileReservedTime": Key(int, 72, B, live=True),
    "deleteWhen": Key(str, "04", B, live=True),
    "cleanResourceInterval": Key(int, 10_000, B, live=True),
    "diskMaxUsedSpaceRatio": Key(int, 75, B, live=True),
    "diskSpaceCleanForciblyRatio": Key(float, 0.85, B, live=True),
    "diskSpaceWarningLevelRatio": Key(float, 0.90, B, live=True),
    # Topics and consumers.
    "autoCreateTopicEnable": Key(_bool, True, B, live=True),
    "defaultTopicQueueNums": Key(int, 8, B, live=True),
    "longPollingEnable": Key(_bool, True, B),
    # Where a new consumer group starts on a queue (core/group_start.py).
    "initPopOffsetByCheckMsgInMem": Key(_bool, True, B, live=True),
    "accessMessageInMemoryMaxRatio": Key(int, 40, B, live=True),  # percent of physical memory
    # Delay messages (broker/timers.py) and transactional messages (broker/transactions.py).
    "timerPrecisionMs": Key(int, 1000, B),  # the longest the timer loop sleeps between looks at its index
    "timerMaxDelaySec": Key(int, 259_200, B, live=True),  # a delivery time further ahead is refused
    "transactionTimeOut": Key(int, 6000, B, live=True),  # ms an undecided half message waits for its first check
    "transactionCheckInterval": Key(int, 30_000, B, live=True),  # ms between checks of one half message
    "transactionCheckMax": Key(int, 15, B, live=True),  # checks before a half message is given up
    # Replication (RIP-34 quorum write; spec rocketmq-ha.md 1.1). The quorum keys apply to the next send.
    "totalReplicas": Key(int, 1, B),
    "inSyncReplicas": Key(int, 1, B, live=True),
    "minInSyncReplicas": Key(int, 1, B, live=True),
    "enableAutoInSyncReplicas": Key(_bool, False, B, live=True),
    "haMaxGapNotInSync": Key(int, limits.HA_MAX_GAP_NOT_IN_SYNC_DEFAULT, B, live=True),
    "slaveTimeout": Key(int, limits.SLAVE_TIMEOUT_MS_DEFAULT, B, live=True),
    "enableSlaveActingMaster": Key(_bool, False, B),
    "syncBrokerMemberGroupPeriod": Key(int, 1000, B),
    "haSendHeartbeatInterval": Key(int, limits.HA_SEND_HEARTBEAT_INTERVAL_MS_DEFAULT, B),
    "haHousekeepingInterval": Key(int, limits.HA_HOUSEKEEPING_INTERVAL_MS_DEFAULT, B),
    "haTransferBatchSize": Key(int, limits.REPLICATION_TRANSFER_BATCH_BYTES_DEFAULT, B),
    # Controller mode on the broker (RIP-44; spec rocketmq-ha.md 2.1, 2.7, 2.8).
    "enableControllerMode": Key(_bool, False, B),
    "controllerAddr": Key(str, "", B),  # host:port of every controller, separated by ;
    "brokerElectionPriority": Key(int, limits.ELECTION_PRIORITY_DEFAULT, B, live=True),
    "allAckInSyncStateSet": Key(_bool, False, B, live=True),
    # A slave that copies the log but never joins the SyncStateSet, so it is never elected.
    "asyncLearner": Key(_bool, False, B),
    # An empty slave copies only its master's last commit-log segment, not the whole log.
    "syncFromLastFile": Key(_bool, False, B),
    "haMaxTimeSlaveNotCatchup": Key(int, 15_000, B, live=True),
    "brokerHeartbeatInterval": Key(int, 1000, B),
    "controllerHeartBeatTimeoutMills": Key(int, 10_000, B, live=True),  # each heartbeat carries it
    "syncBrokerMetadataPeriod": Key(int, 5000, B),
    "checkSyncStateSetPeriod": Key(int, 5000, B),
    # quorumq: how long a master fences writes while its preferred broker catches up before a hand-over.
    "preferredMasterHandOverTimeoutMillis": Key(int, 3000, B, live=True),
    # Name server.
    "brokerNotActiveTimeoutMillis": Key(int, 120_000, N),
    "scanNotActiveBrokerInterval": Key(int, 5000, frozenset({Kind.NAMESRV, Kind.CONTROLLER})),
    # Controller (RocketMQ's ControllerConfig; the consensus is ZooKeeper, not DLedger).
    "zookeeperAddress": Key(str, "127.0.0.1:2181", C),  # quorumq: the ZooKeeper connect string
    "zookeeperRoot": Key(str, "/quorumq", C),  # quorumq: where the controllers keep their state
    "zookeeperSessionTimeoutMillis": Key(int, 4000, C),  # quorumq: a lost leader steps down after this
    "scanInactiveMasterInterval": Key(int, 5000, C),
    "electMasterMaxRetryCount": Key(int, 3, C),
    "enableElectUncleanMaster": Key(_bool, False, C, live=True),
    "notifyBrokerRoleChanged": Key(_bool, True, C),
    "enablePreferredMaster": Key(_bool, False, C, live=True),
    # Connections to the gRPC port of every server (connection_limits.py). RocketMQ's proxy names the
    # first two; the others are quorumq's.
    "grpcClientIdleTimeMills": Key(int, limits.CONNECTION_IDLE_MS_DEFAULT, EVERY),
    "grpcMaxConcurrentCallsPerConnection": Key(int, limits.CALLS_PER_CONNECTION_DEFAULT, EVERY),
    "grpcMaxConnections": Key(int, 0, EVERY),  # 0: limits.connections_max of the soft RLIMIT_NOFILE
    "grpcMaxConnectionsPerAddress": Key(int, limits.CONNECTIONS_PER_ADDRESS_DEFAULT, EVERY),
    "grpcPendingAnswerBytesPerConnection": Key(int, limits.PENDING_ANSWER_BYTES_PER_CONNECTION_DEFAULT, EVERY),
    "grpcPendingAnswerBytesTotal": Key(int, limits.PENDING_ANSWER_BYTES_TOTAL_DEFAULT, EVERY),
    "grpcUnreadAnswerTimeoutMills": Key(int, limits.UNREAD_ANSWER_TIMEOUT_MS_DEFAULT, EVERY),
    # Metrics (RocketMQ 5's exporter keys; quorumq exports Prometheus only, at /metrics).
    "metricsExporterType": Key(_choice("DISABLE", "PROM"), "DISABLE", BNC),
    "metricsPromExporterHost": Key(str, "", BNC),  # empty: bindAddress
    "metricsPromExporterPort": Key(int, 5557, BNC),
    # Authentication and authorization (RocketMQ 5.3's ACL 2.0 keys; docs/security.md). Every server
    # knows them, so one `quorumq up --set` reaches all; the controller serves no v5 client yet. A
    # proxy checks no signature (the brokers check each call it passes on) and signs its own calls
    # with the inner credentials.
    "authenticationEnabled": Key(_bool, False, BNC),
    "authorizationEnabled": Key(_bool, False, BNC),
    "initAuthenticationUser": Key(auth.init_user, None, BNC, secret=True),
    "innerClientAuthenticationCredentials": Key(auth.inner_credentials, None, EVERY, secret=True),
    # quorumq: how far x-mq-date-time may lie from the server's clock; 0: not checked (core/auth.py).
    "authenticationDateTimeWindowMillis": Key(int, 0, BNC),
    # TLS on the gRPC port and the HA port (tls.py), RocketMQ's TlsSystemConfig keys. Its permissive
    # mode (TLS and plaintext on one port) is left out: a gRPC port serves one or the other.
    "tls.server.mode": Key(_choice("disabled", "enforcing"), "disabled", EVERY),
    "tls.server.certPath": Key(str, "", EVERY),  # PEM chain; also what this process presents as a client
    "tls.server.keyPath": Key(str, "", EVERY),
    "tls.server.trustCertPath": Key(str, "", EVERY),  # the CA of peers; empty: the system's roots
    "tls.server.need.client.auth": Key(_choice("none", "require"), "none", EVERY),  # require: mutual TLS
}

# Keys RocketMQ knows whose feature quorumq lacks, where ignoring them would leave an operator
# believing in a protection that is not there: refused with the reason.
ROCKETMQ_KEYS_REFUSED = {
    "aclEnable": "ACL 1.0 (plain_acl.yml) is not supported; authenticationEnabled turns on ACL 2.0 "
                 "authentication (docs/security.md)",
}

# Keys RocketMQ's broker or name server knows that quorumq does not use (yet): accepted, warned once.
ROCKETMQ_KEYS_UNUSED = frozenset("""
    autoCreateSubscriptionGroup brokerTopicEnable
    clientCallbackExecutorThreads clientManageThreadPoolNums clusterTopicEnable commitIntervalCommitLog
    consumerManageThreadPoolNums defaultQueryMaxNum deleteCommitLogFilesInterval
    deleteConsumeQueueFilesInterval destroyMapedFileIntervalForcibly enableCalcFilterBitMap
    enableConsumeQueueExt enableDLegerCommitLog enablePropertyFilter fetchNamesrvAddrByAddressServer
    filterServerNums flushCommitLogLeastPages flushCommitLogThoroughInterval flushConsumeQueueLeastPages
    flushConsumeQueueThoroughInterval flushIntervalConsumeQueue highSpeedMode mappedFileSizeConsumeQueue
    maxTransferBytesOnMessageInDisk maxTransferBytesOnMessageInMemory maxTransferCountOnMessageInDisk
    maxTransferCountOnMessageInMemory messageDelayLevel messageIndexEnable messageIndexSafe
    pullMessageThreadPoolNums putMsgIndexHightWater queryMessageThreadPoolNums
    redeleteHangedFileInterval rejectTransactionMessage sendMessageThreadPoolNums
    sendThreadPoolQueueCapacity serverChannelMaxIdleTimeSeconds serverSelectorThreads
    serverWorkerThreads slaveReadEnable storePathCommitLog storePathConsumeQueue storePathIndex
    transientStorePoolEnable transientStorePoolSize useEpollNativeSelector
    useReentrantLockWhenPutMessage warmMapedFileEnable checkCRCOnRecover traceTopicEnable
    kvConfigPath configStorePath orderMessageEnable controllerType controllerDLegerGroup
    controllerDLegerPeers controllerDLegerSelfId controllerStorePath isProcessReadEvent
    mappedFileSize syncControllerMetadataPeriod fetchControllerAddrByDnsLookup
    """.split())


def read_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text: `k=v`, `k: v` or `k v`, `#`/`!` comments, `\\` continuations."""
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_pair(logical)
        result[key] = value
        logical = ""
    if logical:
        key, value = _split_pair(logical)
        result[key] = value
    return result


_PAIR = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)$")


def _split_pair(line: str) -> tuple[str, str]:
    key, value = _PAIR.match(line).groups()
    return key, value


class Config:
    """A process's settings: declared keys with their defaults, overlaid with what was given."""

    def __init__(self, kind: Kind, values: dict[str, str], source: str = "config") -> None:
        self.kind = kind
        self._values: dict[str, Any] = {
            name: key.default for name, key in KEYS.items() if kind in key.kinds
        }
        unused = []
        for name, text in values.items():
            if name in self._values:
                self._values[name] = _parse_value(name, text)
            elif name in ROCKETMQ_KEYS_REFUSED:
                raise QuorumqError(Error.CONFIG_INVALID, f"{name} in {source}: {ROCKETMQ_KEYS_REFUSED[name]}")
            elif name in KEYS or name in ROCKETMQ_KEYS_UNUSED:
                unused.append(name)
            else:
                raise QuorumqError(Error.CONFIG_INVALID, f"unknown config key {name!r} in {source}")
        if unused:
            log.warning("%s: keys RocketMQ knows but a %s of quorumq does not use: %s",
                        source, kind.value, ", ".join(sorted(unused)))
        self._check()

    @classmethod
    def load(cls, kind: Kind, path: Path) -> "Config":
        return cls(kind, read_properties(Path(path).read_text()), source=str(path))

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def as_strings(self) -> dict[str, str]:
        """Every value as text, a secret one masked."""
        return {name: "******" if value is not None and KEYS[name].secret else _format_value(value)
                for name, value in sorted(self._values.items())}

    def update_live(self, name: str, text: str) -> None:
        """Apply one key to a running process; keys that need a restart are refused."""
        key = KEYS.get(name)
        if key is None or self.kind not in key.kinds:
            raise QuorumqError(Error.CONFIG_INVALID, f"unknown config key {name!r} for a {self.kind.value}")
        if not key.live:
            raise QuorumqError(Error.CONFIG_INVALID, f"{name} cannot be changed while running; restart with it")
        previous = self._values[name]
        self._values[name] = _parse_value(name, text)
        try:
            self._check()
        except QuorumqError:
            self._values[name] = previous
            raise

    def _check(self) -> None:
        if self._values["grpcMaxConnections"] < 0:
            raise QuorumqError(Error.CONFIG_INVALID, "grpcMaxConnections must not be negative (0: a quarter of "
                                                     "the soft RLIMIT_NOFILE)")
        for name in ("grpcClientIdleTimeMills", "grpcMaxConcurrentCallsPerConnection",
                     "grpcMaxConnectionsPerAddress", "grpcPendingAnswerBytesPerConnection",
                     "grpcPendingAnswerBytesTotal", "grpcUnreadAnswerTimeoutMills"):
            if self._values[name] < 1:
                raise QuorumqError(Error.CONFIG_INVALID, f"{name} must be at least 1, got {self._values[name]}")
        if self._values["grpcPendingAnswerBytesTotal"] < self._values["grpcPendingAnswerBytesPerConnection"]:
            raise QuorumqError(Error.CONFIG_INVALID, "grpcPendingAnswerBytesTotal must be at least "
                                                     "grpcPendingAnswerBytesPerConnection")
        self.users()  # two users of one name differ: an error even with authentication off
        if self._values.get("authenticationEnabled") and self._values["innerClientAuthenticationCredentials"] is None:
            raise QuorumqError(Error.CONFIG_INVALID, "authenticationEnabled needs innerClientAuthentication"
                                                     "Credentials, which cluster members sign their calls with")
        if self._values.get("authorizationEnabled") and not self._values["authenticationEnabled"]:
            raise QuorumqError(Error.CONFIG_INVALID, "authorizationEnabled needs authenticationEnabled: rules "
                                                     "are about who signed a call")
        if self._values.get("authenticationDateTimeWindowMillis", 0) < 0:
            raise QuorumqError(Error.CONFIG_INVALID, "authenticationDateTimeWindowMillis must not be negative "
                                                     "(0: not checked)")
        self._check_tls()
        if self.kind is Kind.BROKER:
            self._check_broker()
        elif self.kind is Kind.CONTROLLER and not self._values["zookeeperAddress"]:
            raise QuorumqError(Error.CONFIG_INVALID, "a controller needs zookeeperAddress")
        elif self.kind is Kind.PROXY:
            self._check_proxy()

    def inner_credentials(self) -> auth.Credentials | None:
        """What this process signs its calls to other cluster members with."""
        user = self._values["innerClientAuthenticationCredentials"]
        return user.credentials if user is not None else None

    def users(self) -> dict[str, auth.User]:
        """The users a v5 client may authenticate as, by access key."""
        try:
            return auth.known_users(self._values.get("initAuthenticationUser"),
                                    self._values["innerClientAuthenticationCredentials"])
        except ValueError as exc:
            raise QuorumqError(Error.CONFIG_INVALID, f"initAuthenticationUser and "
                                                     f"innerClientAuthenticationCredentials: {exc}") from None

    def _check_tls(self) -> None:
        values = self._values
        if values["tls.server.mode"] == "enforcing":
            for key in ("tls.server.certPath", "tls.server.keyPath"):
                if not values[key]:
                    raise QuorumqError(Error.CONFIG_INVALID, f"tls.server.mode=enforcing needs {key}")
        if values["tls.server.need.client.auth"] == "require":
            if values["tls.server.mode"] != "enforcing":
                raise QuorumqError(Error.CONFIG_INVALID, "tls.server.need.client.auth=require needs "
                                                         "tls.server.mode=enforcing")
            if not values["tls.server.trustCertPath"]:
                raise QuorumqError(Error.CONFIG_INVALID, "tls.server.need.client.auth=require needs "
                                                         "tls.server.trustCertPath (the CA of client certificates)")

    def _check_message_size(self) -> None:
        if not 0 < self._values["maxMessageSize"] <= limits.MESSAGE_BODY_BYTES_CEILING:
            raise QuorumqError(Error.CONFIG_INVALID,
                               f"maxMessageSize must lie in 1..{limits.MESSAGE_BODY_BYTES_CEILING}")

    def _check_proxy(self) -> None:
        self._check_message_size()
        if not 0 <= self._values["batchMaxDelayMs"] <= limits.PROXY_BATCH_MAX_DELAY_MS_MAX:
            raise QuorumqError(Error.CONFIG_INVALID, f"batchMaxDelayMs must lie in "
                                                     f"0..{limits.PROXY_BATCH_MAX_DELAY_MS_MAX}")
        if not self._values["namesrvAddr"]:
            raise QuorumqError(Error.CONFIG_INVALID, "a proxy needs namesrvAddr, where it learns the routes")

    def _check_broker(self) -> None:
        self._check_message_size()
        size = self._values["maxMessageSize"]
        try:
            limits.check_segment_size(self._values["mappedFileSizeCommitLog"], size)
        except ValueError as exc:
            raise QuorumqError(Error.CONFIG_INVALID, str(exc)) from None
        try:
            parse_delete_when(self._values["deleteWhen"])
        except ValueError as exc:
            raise QuorumqError(Error.CONFIG_INVALID, str(exc)) from None
        if not 0 <= self._values["accessMessageInMemoryMaxRatio"] <= 100:
            raise QuorumqError(Error.CONFIG_INVALID, "accessMessageInMemoryMaxRatio must lie in 0..100")
        for key in ("brokerClusterName", "brokerName"):  # the name server refuses others (each is also a topic)
            check_name(self._values[key], Error.CONFIG_INVALID, key)
        queues = self._values["defaultTopicQueueNums"]
        if not 0 < queues <= limits.QUEUES_PER_TOPIC_MAX:
            raise QuorumqError(Error.CONFIG_INVALID,
                               f"defaultTopicQueueNums must lie in 1..{limits.QUEUES_PER_TOPIC_MAX}")
        for key in ("timerPrecisionMs", "timerMaxDelaySec", "transactionTimeOut", "transactionCheckInterval"):
            if self._values[key] < 1:
                raise QuorumqError(Error.CONFIG_INVALID, f"{key} must be at least 1, got {self._values[key]}")
        if self._values["transactionCheckMax"] < 0:
            raise QuorumqError(Error.CONFIG_INVALID, "transactionCheckMax must not be negative")
        self._check_replication()

    def _check_replication(self) -> None:
        values = self._values
        slave, broker_id = values["brokerRole"] == "SLAVE", values["brokerId"]
        if values["enableControllerMode"]:
            # The controller assigns the id and the role; brokerRole and brokerId are ignored.
            if not values["controllerAddr"]:
                raise QuorumqError(Error.CONFIG_INVALID, "enableControllerMode needs controllerAddr")
            if values["brokerElectionPriority"] < 0:
                raise QuorumqError(Error.CONFIG_INVALID, "brokerElectionPriority must not be negative")
            if values["asyncLearner"] and values["brokerElectionPriority"] == limits.PREFERRED_MASTER_PRIORITY:
                raise QuorumqError(Error.CONFIG_INVALID, "an asyncLearner is never elected, so it cannot be "
                                                         "the preferred master (brokerElectionPriority=0)")
        elif values["asyncLearner"]:
            raise QuorumqError(Error.CONFIG_INVALID, "asyncLearner needs enableControllerMode: only a controller "
                                                     "keeps a SyncStateSet")
        elif slave and broker_id < 1 or not slave and broker_id != 0:
            raise QuorumqError(Error.CONFIG_INVALID, f"brokerId {broker_id} does not fit brokerRole "
                                                     f"{values['brokerRole']}: a master is 0, a slave 1 or more")
        for name in ("totalReplicas", "inSyncReplicas", "minInSyncReplicas", "haMaxGapNotInSync", "slaveTimeout",
                     "syncBrokerMemberGroupPeriod", "haMaxTimeSlaveNotCatchup", "brokerHeartbeatInterval",
                     "controllerHeartBeatTimeoutMills", "syncBrokerMetadataPeriod", "checkSyncStateSetPeriod",
                     "preferredMasterHandOverTimeoutMillis"):
            if values[name] < 1:
                raise QuorumqError(Error.CONFIG_INVALID, f"{name} must be at least 1, got {values[name]}")
        if not 0 < values["haTransferBatchSize"] <= limits.REPLICATION_TRANSFER_BATCH_BYTES_MAX:
            raise QuorumqError(Error.CONFIG_INVALID, "haTransferBatchSize must lie in "
                                                     f"1..{limits.REPLICATION_TRANSFER_BATCH_BYTES_MAX}")
        if not 0 < values["haSendHeartbeatInterval"] < values["haHousekeepingInterval"]:
            raise QuorumqError(Error.CONFIG_INVALID, "haSendHeartbeatInterval must be positive and below "
                                                     "haHousekeepingInterval")


def _parse_value(name: str, text: str) -> Any:
    try:
        return KEYS[name].parse(text.strip())
    except ValueError as exc:
        raise QuorumqError(Error.CONFIG_INVALID, f"bad value for {name}: {exc}") from None


def _format_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def write_properties(path: Path, values: dict[str, str]) -> None:
    """Readable by its owner alone: a config may hold secrets (initAuthenticationUser and others)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a file written before keeps its mode otherwise
    with os.fdopen(descriptor, "w") as file:
        file.write("".join(f"{key}={value}\n" for key, value in values.items()))
