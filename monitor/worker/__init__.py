"""Layer 5a, worker: the streaming job on Kafka, from partitions to snapshots."""
