"""Layer 5b, offline: the same tables over files: replay, backtest, compare, gate, report."""
