"""What a produce may put in a topic: its ``max.message.bytes`` (control_plane.topic_config), read
once a second at most per topic, the configurations read again only when ``topic_configs`` moved."""

from __future__ import annotations

import time

from control_plane.topic_config import TopicConfig, latest_config
from log_store.engine import table_version

MAX_AGE = 1.0  # seconds a topic's limit is used before it is looked up again


class TopicLimits:
    """Each topic's limit for produced batches, as the topic's configuration says (called on the pool)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._rows: tuple[int, list[dict]] = (-2, [])  # topic_configs' version and rows
        self._limits: dict[str, tuple[int, float]] = {}  # topic -> (max.message.bytes, when looked up)

    def max_message_bytes(self, topic: str) -> int:
        """``topic``'s ``max.message.bytes``; UnknownTopicError (or TopicDeletedError, StorageError)
        if it is not a live topic."""
        hit = self._limits.get(topic)
        if hit is not None and time.monotonic() - hit[1] <= MAX_AGE:
            return hit[0]
        location = self.ctx.view(topic, max_age=MAX_AGE).record.location
        tables = self.ctx.admin.tables
        version = table_version(self.ctx.spark, tables.path("topic_configs"))
        rows = self._rows
        if rows[0] != version:
            rows = self._rows = (version, tables.rows_at("topic_configs", version))
        limit = TopicConfig.of(latest_config(rows[1], location)[1]).max_message_bytes
        self._limits[topic] = (limit, time.monotonic())
        return limit
