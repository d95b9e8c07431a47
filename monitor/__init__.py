"""ragmon: a streaming production monitor for RAG answer/partial/abstain decisions."""

__all__: list[str] = []
