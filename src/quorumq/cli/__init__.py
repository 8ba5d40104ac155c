"""The `quorumq` command line."""
