"""quorumq: a message broker cluster that speaks the Apache RocketMQ 5 client protocol."""

__version__ = "0.1.0"
