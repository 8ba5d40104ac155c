"""The cross-cluster replicator (Replicator 2.0) as Spark Structured Streaming queries: a quorumq
source and sink (datasource.py), the jobs built on them (jobs.py) and the driver (app.py)."""
