"""What the wire says, below every server: translation to and from the RocketMQ v5 protocol and the
names both the name server and the brokers' endpoints publish."""
