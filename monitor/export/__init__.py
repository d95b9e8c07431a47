"""Layer 4, export: a snapshot of tables and detectors becomes Prometheus metrics."""
