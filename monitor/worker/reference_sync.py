"""Reference profiles shared by the workers through the references topic.

At start a worker installs the newest reference of every release (`load`); while it
runs it follows the topic (`poll`): a reference another worker froze, or one
`ragmon reference freeze/import` put there, is installed; a freeze request makes the
release freeze again from new traffic. What this worker published itself is
remembered, so reading it back installs nothing twice.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from monitor.detect.drift import Drift
from monitor.detect.reference import FREEZE_PREFIX, from_bytes
from monitor.settings import Settings
from monitor.worker import topics

__all__ = ["ReferenceSync"]

log = logging.getLogger("ragmon.worker")


class ReferenceSync:
    """Keeps a `Drift`'s references in step with the references topic."""

    def __init__(self, settings: Settings, drift: Drift) -> None:
        self.settings = settings
        self.drift = drift
        self.published: dict[bytes, bytes] = {}  # references this worker knows, by key
        self.loaded = False
        self._consumer: AIOKafkaConsumer | None = None
        self._loading = asyncio.Lock()

    async def load(self) -> None:
        """Install the newest reference of every release on the topic (once: the first
        batch and the polling timer may both ask)."""
        async with self._loading:
            if not self.loaded:
                await self._load()

    async def _load(self) -> None:
        blobs = await topics.read_topic(self.settings, self.settings.topic_references, 0)
        for key, blob in blobs.items():
            if key.startswith(FREEZE_PREFIX):
                continue
            self.published[key] = blob
            try:
                self.drift.install(from_bytes(self.drift.layout, blob))
            except ValueError as exc:  # another layout (settings changed): skip, say so
                log.warning("reference not loaded: %s", exc)
        self.loaded = True
        log.info("loaded %d references", len(blobs))

    async def poll(self) -> None:
        """Apply what arrived on the topic since the last poll."""
        if self._consumer is None:
            consumer = AIOKafkaConsumer(**topics.aiokafka_options(self.settings), group_id=None,
                                        enable_auto_commit=False, auto_offset_reset="latest")
            await consumer.start()
            consumer.assign([TopicPartition(self.settings.topic_references, 0)])
            self._consumer = consumer
        batches = await self._consumer.getmany(timeout_ms=100)
        for record in (r for records in batches.values() for r in records):
            key, value = record.key or b"", record.value or b""
            if key.startswith(FREEZE_PREFIX):
                release = key[len(FREEZE_PREFIX):].decode()
                log.info("freeze requested for release %s: re-freezing from new traffic",
                         release)
                self.drift.refreeze(release)
            elif self.published.get(key) != value:
                try:
                    self.drift.install(from_bytes(self.drift.layout, value))
                except ValueError as exc:
                    log.warning("reference %r not installed: %s", key, exc)
                    continue
                self.published[key] = value
                log.info("reference for release %s installed from the topic", key.decode())
