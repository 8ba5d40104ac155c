"""Every limit quorumq enforces, named in one place.

Past a limit a request is rejected with a stable error code; nothing grows without bound.
Values that operators tune through config files (maxMessageSize, the segment size) have their
defaults here and are checked against the fixed limits when a config is loaded.
"""

KiB = 1024
MiB = 1024 * KiB

# Names: RocketMQ's rule for topics and groups (characters %|a-zA-Z0-9_-).
NAME_LENGTH_MAX = 127
NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
# A consumer group's name leaves room for the prefix of its dead-letter topic, %DLQ%<group>, so that
# every group's DLQ topic is a legal topic name (RocketMQ takes groups of up to 255 characters).
GROUP_NAME_LENGTH_MAX = NAME_LENGTH_MAX - len("%DLQ%")
# An error quotes at most this much of a name or other text the client sent: enough to recognise it
# (longer than any legal name or tag), while a 10 KB name echoed whole in the status would overflow
# the 8 KiB of metadata gRPC clients accept and fail the call with RESOURCE_EXHAUSTED instead.
QUOTED_TEXT_MAX = 256

# Messages.
MESSAGE_BODY_BYTES_CEILING = 64 * MiB  # the largest maxMessageSize a config may ask for
PROPERTIES_BYTES_MAX = 32767  # RocketMQ stores the properties length in a short
PROPERTY_COUNT_MAX = 128
TAG_LENGTH_MAX = 255
KEY_LENGTH_MAX = 255
KEYS_PER_MESSAGE_MAX = 32
# A FIFO message's group (issue 20's rule: at most 64 characters). RocketMQ's proxy counts UTF-8
# bytes and refuses 64 and more (maxMessageGroupSize), so it takes at most 63 bytes: quorumq takes
# every group RocketMQ takes, and a few longer ones.
MESSAGE_GROUP_LENGTH_MAX = 64
# What a dead letter's copy adds to the message's properties (core/dead_letters.py): two topic
# names, two message ids and an attempt count with their names and separators (at most 856 bytes;
# see the unit test), so a message whose properties were accepted always has a DLQ copy that fits.
DEAD_LETTER_PROPERTIES_BYTES_MAX = 1 * KiB
# What parking a delay or transactional message in its system topic adds to its properties: its
# real topic (a name), queue id and delivery time with their names and separators (at most 178 bytes).
PARKED_PROPERTIES_BYTES_MAX = 256
# Room kept in the properties for what the broker stores itself: message id, tag, keys, a dead
# letter's origin, a parked message's real topic.
RESERVED_PROPERTIES_BYTES_MAX = (TAG_LENGTH_MAX + KEY_LENGTH_MAX * (KEYS_PER_MESSAGE_MAX + 1) + 64
                                 + DEAD_LETTER_PROPERTIES_BYTES_MAX + PARKED_PROPERTIES_BYTES_MAX)

# Delay messages (broker/timers.py). The master's index of pending timers is on disk, a file for the
# timers due in each span of this width: the timers of one span are in memory only while it is due
# (a minute's worth), and a 3-day delay needs at most 4,320 files.
TIMER_INDEX_FILE_MS = 60_000
# Timers copied to their topics in one write (and named by one done record): a batch is one
# quorum wait, and its done record stays far below a record's size (at most 20 bytes an offset).
TIMER_DELIVER_BATCH = 512
# Transactional messages (broker/transactions.py): the undecided half messages a master keeps in
# memory (about 200 bytes each); past it a new half message is refused with TOO_MANY_REQUESTS.
TRANSACTIONS_UNDECIDED_MAX = 1_000_000

# Receiving. gRPC refuses an incoming message above 4 MiB unless the receiver raises its limit; the
# official Node.js, C# and Rust clients keep that default (Java, Go, C++ and Python lift it). One
# ReceiveMessage response carries one message, so that message's whole answer must fit.
RECEIVE_ANSWER_BYTES_MAX = 4 * MiB
# Every byte of a record's stored properties ("name\x01value\x02") becomes at most 3 bytes of the
# answer: a map entry adds 4 bytes of tags and lengths to its 2 separators, a key 2 bytes to its
# 1-byte space, and longer values longer lengths, never more than 3 per byte.
ANSWER_PROPERTIES_BYTES_MAX = 3 * PROPERTIES_BYTES_MAX
# The rest of the answer around the body and properties: topic, hosts, digest, receipt handle,
# timestamps, ids and the fields' tags and lengths (under 1 KiB at their longest; see the unit test).
ANSWER_FIELDS_BYTES_MAX = 2 * KiB
# maxMessageSize: the largest body whose one-message answer, with the largest properties a record
# may hold, fits RECEIVE_ANSWER_BYTES_MAX, so every official client can receive whatever the broker
# accepts (4,093,955 bytes; with RocketMQ's 4 MiB every answer passed 4 MiB by its other fields).
MESSAGE_BODY_BYTES_DEFAULT = RECEIVE_ANSWER_BYTES_MAX - ANSWER_PROPERTIES_BYTES_MAX - ANSWER_FIELDS_BYTES_MAX
# x-mq-language of the official clients that lift gRPC's limit: any answer reaches them.
UNLIMITED_RECEIVE_LANGUAGES = frozenset({"JAVA", "GOLANG", "CPP", "PYTHON"})

# One SendMessage request.
BATCH_MESSAGES_MAX = 1024
BATCH_BYTES_MAX = 16 * MiB
GRPC_MARGIN_BYTES = 1 * MiB  # headroom for protobuf framing above a body of maximal size
# A proxy's calls in flight to one broker group per line of merged sends (core/send_batches.py):
# one, so that each call carries all that waited while the previous one was out. A broker's cost
# of a call (its append, flush and replication round) outweighs its cost of a record, so fewer,
# fuller calls save it the most: with two, bench_proxy's calls carried 4 messages on average and
# the master spent 0.33-0.44 of its direct CPU per message, with one 8 and 0.21-0.24, at a higher
# rate (docs/proxy.md).
PROXY_SEND_CALLS_PER_LINE = 1
# batchMaxDelayMs: how long a proxy's next broker call on a line waits for more sends, only while
# the line is under heavy concurrent load (its previous call merged at least
# PROXY_LINGER_MERGED_CALLS_MIN client calls): a client that sends one at a time, or a few
# concurrent ones, never waits. A fuller call costs the broker less per message: in bench_proxy
# (64 sends in flight, each answered in about 20 ms) the master's CPU per message was 0.28 of its
# direct cost with no wait and 0.15-0.20 with 2-5 ms, at a higher rate, while a proxy's lines were
# thinner with 2 proxies than with 1 (docs/proxy.md). RocketMQ's producer batching holds a batch up
# to 10 ms. At most a second.
PROXY_BATCH_MAX_DELAY_MS_DEFAULT = 5
PROXY_LINGER_MERGED_CALLS_MIN = 4
PROXY_BATCH_MAX_DELAY_MS_MAX = 1000
# How long a proxy waits before it opens a producer's Telemetry stream to a broker again, once one
# ended (proxy/telemetry.py): a restarted broker checks its transactions with the producer within
# about this, without a stopped one being called in a tight loop.
PROXY_TELEMETRY_REOPEN_S = 1.0


def grpc_receive_bytes(max_message_size: int) -> int:
    """The gRPC server's receive limit: above the largest single message and the largest batch.
    A broker's send limit too: its largest answer is one message (a v5 receive or pull) or a
    MessageReader batch of PULL_BYTES_MAX, or one record when that record alone is larger."""
    return max(max_message_size, BATCH_BYTES_MAX) + GRPC_MARGIN_BYTES


# Requests, checked on their wire bytes before protobuf parses them (listen.py, RequestBound):
# protobuf builds an object of about 75 bytes for each entry of a repeated field, which takes 2
# bytes on the wire, so a SendMessage of 30M empty messages (60 MB) grew a broker by 2.2 GB before
# any rule was checked. Past a bound the request is refused unparsed.
# Every v5 request but SendMessage (which gRPC's receive limit bounds): the largest legal one is an
# AckMessage of ACK_ENTRIES_MAX entries, each a message id and a receipt handle of under 100 bytes
# (about 100 KiB), or a client's Telemetry settings naming a thousand topics of 127 bytes.
REQUEST_BYTES_MAX = 256 * KiB
# Entries of one AckMessage. RocketMQ has no bound (the official clients ack one message per
# request); as many as one SendMessage carries, far above any receive batch (RECEIVE_BATCH_MAX), so
# its answer, which echoes each entry with a status, stays within about half a MiB.
ACK_ENTRIES_MAX = BATCH_MESSAGES_MAX
# Top-level fields of a request beside its repeated one (a request's few singular fields, each
# sent once by a real client): the pre-parse walk stops after entries max + this many fields.
REQUEST_OTHER_FIELDS_MAX = 16
# Fields within one v5 message of a SendMessage, its system properties' included: its properties
# and keys, and 32 for the rest (the v5 Message has 4 fields, its system properties 22). gRPC's
# receive limit alone would let one message of 17 MiB of empty keys parse into 8.9M strings
# (+390 MB), so a request that could hold more than BATCH_MESSAGES_MAX messages of this many fields
# (each field takes 2 bytes at least) has its messages' fields counted, each message's walk
# stopping past this: a SendMessage parses into at most about 200,000 fields (15 MB).
MESSAGE_FIELDS_MAX = PROPERTY_COUNT_MAX + KEYS_PER_MESSAGE_MAX + 32
# The peak RSS (VmHWM) a broker and its name server stay under while tests send them hostile input
# (docs/client-protocol.md#limits): tests/integration/test_request_bounds.py the requests above,
# seven at once (70 to 90 MiB measured, 398 MiB before these bounds), and
# tests/integration/test_hostile_load.py every input of issue 19 at once at a reduced scale, with
# 16 MiB of unread answers at most (grpcPendingAnswerBytesTotal; a server holds about twice its
# total beside this): 150 to 170 MiB measured for the broker, 78 MiB for the name server (340 MiB
# before its registrations were counted unparsed).
HOSTILE_LOAD_RSS_BYTES_MAX = 256 * MiB


# Work queues.
PENDING_SEND_MESSAGES_MAX = 20000  # messages appended but still waiting for their flush or acks
RECEIVE_BATCH_MAX = 64  # messages in one ReceiveMessage answer
PULL_BATCH_MAX = 1024  # messages in one PullMessage answer
PULL_BYTES_MAX = 16 * MiB
INFLIGHT_PER_QUEUE_MAX = 32768  # received but not acked, per consumer group and queue
LONG_POLL_SECONDS_MAX = 60.0
# What the Telemetry settings tell a consumer, as RocketMQ's proxy does: its long poll when it sets
# none (grpcClientConsumerMaxLongPollingTimeoutMillis), and its receive batch
# (grpcClientConsumerLongPollingBatchSize; the Node.js client receives 0 messages a call without it).
LONG_POLL_SECONDS_DEFAULT = 20
CONSUMER_RECEIVE_BATCH_SIZE = 32
INVISIBLE_SECONDS_MIN = 1.0
INVISIBLE_SECONDS_MAX = 12 * 3600.0
INVISIBLE_SECONDS_DEFAULT = 60.0  # a push consumer sends none and never renews

# Topics.
QUEUES_PER_TOPIC_MAX = 1024
TOPICS_MAX = 65536
# Queues of one broker, summed over its topics (the larger of each topic's read and write counts):
# every topic it may hold at RocketMQ's default 8 queues. Each queue has a directory, its
# consume-queue files and state in memory, so TOPICS_MAX topics of QUEUES_PER_TOPIC_MAX queues
# (67M queues) would exhaust the disk's inodes and the memory long before any other limit.
QUEUES_PER_BROKER_MAX = TOPICS_MAX * 8

# Registrations with the name server (protocol/routes.py RouteRegistry). A broker registers all its
# topics, so one registration carries at most a broker's totals: a broker within its limits always
# registers, and a 120,000-topic registration from anything else is refused.
REGISTRATION_TOPICS_MAX = TOPICS_MAX
REGISTRATION_QUEUES_MAX = QUEUES_PER_BROKER_MAX
# Brokers (cluster, name, id) one name server routes at once: far beyond the 8 brokers of `quorumq up`
# and the few dozen of a large RocketMQ cluster, and it bounds the name server's memory at this many
# registrations of REGISTRATION_BYTES_MAX (each kept as a topic index, not the request itself).
NAMESRV_REGISTRATIONS_MAX = 128
# One topic's entry in a registration at its largest (a 127-byte name, 1024 queues, its message
# type, its tags and lengths), and the registration's other fields at their longest (names,
# 255-byte hosts, under 1 KiB).
REGISTRATION_TOPIC_BYTES_MAX = 142
REGISTRATION_FIELDS_BYTES_MAX = 4 * KiB
# The name server's gRPC receive limit: the largest legal registration fits (8.9 MiB, where gRPC's
# default 4 MiB refused a broker of 30,000 long-named topics); anything larger breaks a limit above.
REGISTRATION_BYTES_MAX = REGISTRATION_TOPICS_MAX * REGISTRATION_TOPIC_BYTES_MAX + REGISTRATION_FIELDS_BYTES_MAX

# A subscription group's retryMaxTimes (redeliveries after the first delivery): RocketMQ's range for
# it in issue 20, 0..64; its default is 16. A customized retry policy lists at most one back-off per
# retry (entries past the last retry are never used).
RETRY_MAX_TIMES_MAX = 64
RETRY_BACKOFFS_MAX = RETRY_MAX_TIMES_MAX

# Consumer groups one broker knows (their first contacts, config/consumerGroups.log): a consumer's
# first contact or an AddConsumerGroups past it is refused with TOO_MANY_REQUESTS, as a topic past
# TOPICS_MAX is; a slave still copies whatever its master holds. As many as topics: each group is an
# entry in memory and a record in the log, and every group rides in each metadata answer a slave
# polls (65,536 names of 127 bytes are 9 MB).
GROUPS_MAX = 65536
# Groups one AddConsumerGroups request may carry: a request is validated and written as one log
# record on the event loop, and 1,024 names of 127 bytes make a 150 KB record (the admin client
# sends more in several requests).
GROUPS_PER_REQUEST_MAX = 1024
# A consumer whose connection stays open but that stops heartbeating (frozen, or cut off without a
# reset) is no longer counted live after RocketMQ's channelExpiredTimeout default: the official
# clients heartbeat every 10 s, so 120 s is a dozen missed beats, never a slow one.
CONSUMER_SESSION_EXPIRY_MS = 120_000
# Topic and group logs (store/keyed_log.py): the next change rewrites a log with only its live
# entries once it holds more than this many changes per live entry, plus the slack (so that a few
# entries changed often are not rewritten at every change). A change then costs O(1) writes
# amortised, and a log stays within about twice its live size.
KEYED_LOG_RECORDS_PER_ENTRY = 2
KEYED_LOG_SLACK_RECORDS = 1024

# Store layout.
COMMIT_LOG_SEGMENT_BYTES_DEFAULT = 1024 * MiB  # mappedFileSizeCommitLog
COMMIT_LOG_SEGMENT_BYTES_MIN = 64 * KiB
CONSUME_QUEUE_ENTRIES_PER_FILE = 300_000  # RocketMQ's mapedFileSizeConsumeQueue / 20
RECORD_HEADER_BYTES_MAX = 4 * KiB  # fixed fields plus topic and host strings, properties aside
HOST_LENGTH_MAX = 255  # the born host string ("ip:port") a record carries
CONSUME_QUEUE_SCAN_ENTRIES_MAX = 16_384  # queue entries one read examines, matched by the tag filter or not
RETENTION_SEGMENTS_PER_RUN_MAX = 10  # commit-log segments one clean-up run deletes (deleteFileBatchMax)
# Consume-queue files a store keeps open at once (store/consume_queue.py, OpenQueueFiles); opening one
# more closes the least recently used, opened again on its next use. RocketMQ maps every file and has
# no key for this. Kept open, 10,000 auto-created topics held 10,024 files and at the process's limit
# every send failed: a quarter of the soft RLIMIT_NOFILE leaves the rest to sockets (a quarter too,
# connections_max), commit-log segments and the JSON stores. (The checkpoint thread briefly opens
# one more, to sync a file closed since its writes.)
QUEUE_FILES_OPEN_SHARE = 4  # the bound is the soft RLIMIT_NOFILE divided by this
QUEUE_FILES_OPEN_MIN = 16  # under a tiny limit still: a read or write uses one file at a time
QUEUE_FILES_OPEN_UNLIMITED = 65_536  # the bound when the soft limit is RLIM_INFINITY (negative)


def queue_files_open_max(soft_open_files: int) -> int:
    """The bound on open consume-queue files under the process's soft RLIMIT_NOFILE."""
    if soft_open_files < 0:
        return QUEUE_FILES_OPEN_UNLIMITED
    return max(QUEUE_FILES_OPEN_MIN, soft_open_files // QUEUE_FILES_OPEN_SHARE)


def check_segment_size(segment_bytes: int, max_message_size: int) -> None:
    """A record never spans segments, so a segment must hold the largest possible record."""
    largest_record = max_message_size + PROPERTIES_BYTES_MAX + RECORD_HEADER_BYTES_MAX
    if segment_bytes < max(COMMIT_LOG_SEGMENT_BYTES_MIN, largest_record):
        raise ValueError(
            f"mappedFileSizeCommitLog={segment_bytes} cannot hold a record of maxMessageSize="
            f"{max_message_size}; it must be at least {max(COMMIT_LOG_SEGMENT_BYTES_MIN, largest_record)}"
        )


# Peers: the gRPC port of each server (connection_limits.py; a config key names each default).


def connections_max(soft_open_files: int) -> int:
    """The connections gRPC accepts at once unless grpcMaxConnections says otherwise: 20,000 idle
    ones made new ones time out, and each holds a file descriptor. As many as consume-queue files
    may be open, a quarter of the soft RLIMIT_NOFILE: sockets and queue files together take at most
    half the descriptors, and the rest stays for commit-log segments, the JSON stores and the
    server's own connections (with a fixed 1,024, 256 silent connections made every topic write
    fail under `ulimit -n 256`)."""
    return queue_files_open_max(soft_open_files)


# Open connections with calls of one client address (grpcMaxConnectionsPerAddress): generous, as every
# local process shares 127.0.0.1; half the total under `ulimit -n 4096`, so that one address cannot
# take every connection there.
CONNECTIONS_PER_ADDRESS_DEFAULT = 512
# After a look-up of an address's open connections (among the server's descriptors, at its cap) made
# no room, the next waits this long: a look-up of 512 connections takes about 5 ms of the event
# loop, so a client at its cap calling again and again costs the server at most about 5% of a core,
# and one that closed a connection meanwhile gets its place back this much later at most.
OPEN_CONNECTIONS_LOOKUP_INTERVAL_MS = 100
# A connection without calls for this long is closed (RocketMQ proxy's grpcClientIdleTimeMills, 120 s);
# an open stream (Telemetry) keeps it. A client reconnects when it next calls.
CONNECTION_IDLE_MS_DEFAULT = 120_000
# A connection that has not finished its HTTP/2 handshake in this long is closed (gRPC: 120 s);
# clients send theirs at once, so only a socket opened and left silent waits this long.
HANDSHAKE_TIMEOUT_MS = 10_000
# Calls one connection may have open (grpcMaxConcurrentCallsPerConnection; RocketMQ: unlimited): far
# above an official client's, a long poll per queue included; a gRPC client queues calls past it.
CALLS_PER_CONNECTION_DEFAULT = 1000
# Answer bytes one connection may hold handed to gRPC but not sent (grpcPendingAnswerBytesPerConnection):
# a client that stops reading kept 200 PullBatch answers (+728 MB). Four whole PULL_BYTES_MAX batches;
# one answer of any size is always let through to a connection holding none.
PENDING_ANSWER_BYTES_PER_CONNECTION_DEFAULT = 4 * PULL_BYTES_MAX
# How long an answer waits for room on its connection before its call ends with RESOURCE_EXHAUSTED:
# a client that reads drains 64 MiB on localhost in well under a second.
PENDING_ANSWER_WAIT_S = 5.0
# Answer bytes all the connections of one server may hold handed to gRPC but not sent
# (grpcPendingAnswerBytesTotal): the room of each connection alone let a thousand connections that
# never read hold 64 GiB. Four connections' room: the RSS counts a held byte about twice (the
# answer and gRPC's copy), so unread answers cost a server at most about 512 MiB. An answer past it
# is refused at once (waiting would hold it too).
PENDING_ANSWER_BYTES_TOTAL_DEFAULT = 4 * PENDING_ANSWER_BYTES_PER_CONNECTION_DEFAULT
# A connection that holds answers and has sent none of them for this long is closed
# (grpcUnreadAnswerTimeoutMills), freeing them and its share of the total: its client stopped
# reading, and would keep them until its deadline, or for ever without one. A client that reads
# takes even a PULL_BYTES_MAX answer within 20 s on a link of 1 MB/s, so a minute closes no reader.
UNREAD_ANSWER_TIMEOUT_MS_DEFAULT = 60_000

# Metrics (src/quorumq/metrics.py): label values one process exports, so that ten thousand topics
# cannot make a scrape of megabytes; values past a bound are summed under METRICS_OVERFLOW_LABEL.
METRICS_TOPICS_MAX = 200  # topics labelled in the per-topic series (a Grafana table stays readable)
METRICS_CLIENT_VERSIONS_MAX = 32  # client version labels; a client may send any string
METRICS_LABEL_CHARS_MAX = 64  # of a label value a client chose (its version), cut past this
METRICS_GROUP_TOPICS_MAX = 500  # (consumer group, topic) pairs labelled in the per-group series
METRICS_OVERFLOW_LABEL = "(other)"  # not a legal topic or group name (NAME_PATTERN): it never collides
METRICS_SAMPLE_INTERVAL_S = 1.0  # how often a broker samples whether its quorum is degraded
HTTP_HEAD_BYTES_MAX = 8 * KiB  # the request head a scraper or browser may send (src/quorumq/http.py)
HTTP_BODY_BYTES_MAX = 64 * KiB  # a dashboard action's form: a test message's body, at most

# Replication (master -> slave stream, slave -> master reports).
# The largest record the store can hold at the largest maxMessageSize. A BLANK that pads a segment
# end is shorter than the record that did not fit plus a BLANK header, and RECORD_HEADER_BYTES_MAX
# leaves room for that header, so the same value bounds it.
RECORD_BYTES_CEILING = MESSAGE_BODY_BYTES_CEILING + PROPERTIES_BYTES_MAX + RECORD_HEADER_BYTES_MAX
REPLICATION_TRANSFER_BATCH_BYTES_DEFAULT = 32 * KiB  # haTransferBatchSize: data bytes per frame
REPLICATION_TRANSFER_BATCH_BYTES_MAX = 4 * MiB  # the largest haTransferBatchSize a config may ask for
# One frame's data: a batch of whole records, or one record alone when it is larger than the batch.
REPLICATION_FRAME_DATA_BYTES_MAX = max(REPLICATION_TRANSFER_BATCH_BYTES_MAX, RECORD_BYTES_CEILING)
REPLICATION_FRAME_HEADER_BYTES_MAX = 64  # the largest fixed frame header, names excluded
REPLICATION_FRAME_BYTES_MAX = REPLICATION_FRAME_HEADER_BYTES_MAX + REPLICATION_FRAME_DATA_BYTES_MAX
REPLICATION_READ_BYTES = 256 * KiB  # one socket read on either side
REPLICATION_SLAVES_MAX = 32  # slaves one master streams to at once; more handshakes are refused
REPLICATION_WAITERS_MAX = PENDING_SEND_MESSAGES_MAX  # puts waiting for slave acks at once
HA_MAX_GAP_NOT_IN_SYNC_DEFAULT = 256 * MiB  # haMaxGapNotInSync; the seeds' "256K" is a doc error
HA_SEND_HEARTBEAT_INTERVAL_MS_DEFAULT = 5000  # haSendHeartbeatInterval: report/heartbeat when idle
HA_HOUSEKEEPING_INTERVAL_MS_DEFAULT = 20_000  # haHousekeepingInterval: silence closes the connection
SLAVE_TIMEOUT_MS_DEFAULT = 3000  # slaveTimeout: how long a put waits for slave acks
# Message ids a broker remembers so that a client's retry is not stored twice (in memory only).
RECENT_MESSAGE_IDS_MAX = 50_000  # the official client retries at once: 20 s of sends at its ~2.5k/s
# Controller mode.
ELECTION_PRIORITY_DEFAULT = 2**31 - 1  # brokerElectionPriority (Integer.MAX_VALUE): lower is preferred
PREFERRED_MASTER_PRIORITY = 0  # brokerElectionPriority of the preferred master (issue #5588)
CONTROLLER_ADDRESSES_MAX = 9  # controllerAddr entries a broker tries
BROKERS_PER_SET_MAX = 32  # broker ids one broker set may hold
HA_RECONNECT_BACKOFF_S_MIN = 0.05  # a slave's first retry after losing its master
HA_RECONNECT_BACKOFF_S_MAX = 5.0
# Reconnecting, on every gRPC channel quorumq opens (client/routes.open_channel: brokers to name
# servers, controllers and masters, clients to brokers): a peer back from an outage (a restart, a
# failover to it) is reached within about a second. gRPC's default backoff grows by 1.6 a failed
# attempt to 120 s, and calls fail at once meanwhile without trying: after a 60 s name-server
# outage its broker's first registration got through 14 s after the name server was back.
GRPC_RECONNECT_BACKOFF_MS_MIN = 100  # the first retry's delay
GRPC_RECONNECT_BACKOFF_MS_MAX = 1000
# gRPC's min_reconnect_backoff is in fact the shortest time one connection attempt (TCP and HTTP/2
# handshakes) is given, the next backoff if that is longer: 100 ms to 1 s, where a handshake on a
# LAN takes about a millisecond, and a frozen peer (it accepts TCP, never answers) ends an attempt
# within a second instead of gRPC's 20 s.
GRPC_CONNECT_TIMEOUT_MS_MIN = 100
# HTTP/2 keepalive between brokers and controllers: the controller pings a broker's heartbeat
# stream, a broker the connection of its calls to a controller. A peer whose process is stopped or
# whose machine hangs keeps its TCP connection open, so only an unanswered ping finds it: within
# keepalive time + timeout (about 2.5 s) rather than the 10 s of controllerHeartBeatTimeoutMills.
# gRPC answers pings from its own threads, not the Python event loop, so a busy process answers.
CONTROLLER_KEEPALIVE_TIME_MS = 1000  # a ping after 1 s without incoming data (gRPC's floor for a client's pings)
CONTROLLER_KEEPALIVE_TIMEOUT_MS = 1500  # unanswered this long, the connection ends: room for a loaded machine
# The controllers' server accepts a ping this soon after the last one (gRPC: 5 min, then GOAWAY
# too_many_pings): half the brokers' ping interval, so their timers' jitter never counts as abuse.
CONTROLLER_PING_INTERVAL_MIN_MS = CONTROLLER_KEEPALIVE_TIME_MS // 2

# Signed calls of the cluster protocol (core/cluster_auth.py). Its clients are quorumq's own and
# sign their UTC time in milliseconds, so the window is always on; +-5 min is spec/reliability.md's
# (S3 allows 15 min), room for clocks an NTP daemon keeps within seconds, not for a day's zone.
CLUSTER_SIGNATURE_WINDOW_MS = 5 * 60_000
# Nonces a server keeps to refuse a replayed call, about 210 bytes each (42 MB at the bound): each
# stays about one window, so this takes 660 signed calls a second, sustained, per process (a
# broker's batch benchmark makes about 220: 56k msg/s in calls of 256). Past it a signed call is
# refused with TOO_MANY_REQUESTS until nonces expire; only a holder of a secret can fill it.
CLUSTER_SIGNATURE_NONCES_MAX = 200_000
# ACL 2.0's users and rules (broker/access.py). Every broker sends them all with each registration
# and to its slaves with its metadata, and each server checks a call against them in memory: a
# thousand users with ten entries each is about 300 KB on the wire, within REGISTRATION_BYTES_MAX.
USERS_MAX = 1000
ACL_ENTRIES_PER_SUBJECT_MAX = 64
PASSWORD_LENGTH_MAX = 256
SOURCE_IPS_PER_ENTRY_MAX = 16

assert REPLICATION_TRANSFER_BATCH_BYTES_DEFAULT <= REPLICATION_TRANSFER_BATCH_BYTES_MAX
assert REPLICATION_FRAME_DATA_BYTES_MAX < 1 << 32  # the frame's data length is a u32
assert HA_SEND_HEARTBEAT_INTERVAL_MS_DEFAULT < HA_HOUSEKEEPING_INTERVAL_MS_DEFAULT
assert HA_RECONNECT_BACKOFF_S_MIN < HA_RECONNECT_BACKOFF_S_MAX
assert GRPC_RECONNECT_BACKOFF_MS_MIN < GRPC_RECONNECT_BACKOFF_MS_MAX
assert CONTROLLER_PING_INTERVAL_MIN_MS < CONTROLLER_KEEPALIVE_TIME_MS

# Replicator (the Spark source and sink, and its jobs).
REPLICATOR_PULL_BATCH = 1024  # messages one pull of the source asks for (at most PULL_BATCH_MAX)
# How long the driver reuses the source's end offsets: Spark asks for them on every trigger and more
# often while idle. Well below a trigger (0.5-1 s), or a message waits a trigger longer: at 0.5 s the
# replicator's p99 at 5k msg/s was 1.2 s, at 0.1 s 0.7 s (docs/replicator.md).
REPLICATOR_END_OFFSETS_CACHE_S = 0.1
REPLICATOR_SEND_ATTEMPTS = 5  # sends of one chunk before its records go to the failure policy
REPLICATOR_SEND_BACKOFF_S_MAX = 2.0
REPLICATOR_DEDUPE_SCAN_MAX = 65_536  # destination-queue tail read to find what a replay already wrote
REPLICATOR_SYNC_SPACING = 100  # an offset sync at least every this many messages of a queue (MM2: offset.lag.max)
REPLICATOR_SYNCS_PER_QUEUE_MAX = 64  # offset syncs the checkpoint job keeps per source queue
REPLICATOR_HEARTBEAT_INTERVAL_S = 10.0
REPLICATOR_CHECKPOINT_INTERVAL_S = 10.0
REPLICATOR_CONFIG_INTERVAL_S = 60.0
REPLICATOR_MAX_RECORDS_PER_TRIGGER = 100_000  # default admission per micro-batch, shared by queues
# How long a clean stop waits for a query's running micro-batch to commit before it stops the query
# (which aborts that batch, replayed at the next start): a batch of the default admission takes a few
# seconds on two cores; the few queries of an application stop well within a supervisor's stop timeout.
REPLICATOR_STOP_WAIT_S = 20.0

assert REPLICATOR_PULL_BATCH <= PULL_BATCH_MAX
assert LONG_POLL_SECONDS_DEFAULT <= LONG_POLL_SECONDS_MAX and CONSUMER_RECEIVE_BATCH_SIZE <= RECEIVE_BATCH_MAX
