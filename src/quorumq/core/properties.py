"""RocketMQ's names for the message properties quorumq stores with every record."""

TAGS = "TAGS"
KEYS = "KEYS"
MESSAGE_ID = "UNIQ_KEY"
BODY_ENCODING = "QUORUMQ_BODY_ENCODING"
MESSAGE_GROUP = "__SHARDINGKEY"  # a FIFO message's group
TRANSACTION = "TRAN_MSG"  # "true": a transactional message
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # a delay message's delivery time (epoch ms)
# Any of these makes a message a DELAY message (RocketMQ's TopicMessageType.parseFromMessageProperty).
DELAY = ("DELAY", TIMER_DELIVER_MS, "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
# Where a timer record or a transaction's half message goes once it is due or committed.
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
# A dead letter's copy (core/dead_letters.py): its origin, which a delivery of the copy carries as
# the v5 dead_letter_queue field, and the deliveries it had.
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
# Names with a meaning to RocketMQ: a producer may not set them as user properties.
RESERVED = frozenset({TAGS, KEYS, MESSAGE_ID, BODY_ENCODING, MESSAGE_GROUP, TRANSACTION, *DELAY, "WAIT",
                      "MSG_REGION", "__STARTDELIVERTIME", REAL_TOPIC, REAL_QUEUE_ID, RETRY_TOPIC, ORIGIN_MESSAGE_ID,
                      DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID, RECONSUME_TIME})
# Reserved names a consumer still reads among the user properties: a dead letter's origin and its
# deliveries, which not every official client shows from the v5 fields (Python's shows none).
SHOWN = frozenset({DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID, RECONSUME_TIME})
HIDDEN = RESERVED - SHOWN
