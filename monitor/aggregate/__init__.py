"""Layer 2, aggregate: events are folded into bounded tables per partition and window."""
