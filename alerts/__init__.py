"""The generators of ragmon's Prometheus rules (run `python alerts/generate.py`)."""
