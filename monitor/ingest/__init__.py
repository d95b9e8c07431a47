"""Layer 1, ingest: bytes become decision events or rejections with a reason (the contract)."""
