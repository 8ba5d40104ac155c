"""RocketMQ's names for the message properties quorumq stores with every record."""

TAGS = "TAGS"
KEYS = "KEYS"
MESSAGE_ID = "UNIQ_KEY"
BODY_ENCODING = "QUORUMQ_BODY_ENCODING"
# Names with a meaning to RocketMQ: a producer may not set them as user properties.
RESERVED = frozenset({TAGS, KEYS, MESSAGE_ID, BODY_ENCODING, "DELAY", "WAIT", "TRAN_MSG", "MSG_REGION",
                      "__STARTDELIVERTIME", "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC"})
