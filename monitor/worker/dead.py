"""Dead letters: a rejection's payload (it holds no content) with its reason and the
topic, partition and offset of the message it came from, in headers."""

from __future__ import annotations

from typing import Any

from monitor.export.snapshot import Health
from monitor.ingest.parse import Rejection, payload_form

__all__ = ["DeadLetters"]


class DeadLetters:
    def __init__(self, topic: Any, health: Health) -> None:
        self.topic = topic  # a Faust topic of raw bytes
        self.health = health

    async def of_message(self, message: Any, rejection: Rejection) -> None:
        """Dead-letter `rejection` of a consumed `message`."""
        await self.send((str(message.topic), int(message.partition), int(message.offset)),
                        message.key, rejection)

    async def send(self, source: tuple[str, int, int], key: bytes | None,
                   rejection: Rejection) -> None:
        topic, partition, offset = source
        headers = {
            "ragmon.reason": rejection.reason.encode(),
            "ragmon.detail": rejection.detail.encode()[:512],
            "ragmon.payload": payload_form(rejection.payload).encode(),
            "ragmon.source.topic": topic.encode(),
            "ragmon.source.partition": str(partition).encode(),
            "ragmon.source.offset": str(offset).encode(),
        }
        await self.topic.send(key=key, value=rejection.payload, headers=headers)
        self.health.dlq_produced += 1
