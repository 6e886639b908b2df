"""The rows of the control-plane tables, one pydantic model per kind.

The tables are append-only record logs (Kafka's metadata log, in Delta): a topic row is the
whole state of one topic after one change, numbered by ``topic_version``; an offset-commit row
is one committed position. Current state is the latest row; history is every row.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from log_store.topic_log import PartitionMetadata


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class TopicEvent(str, Enum):
    """What changed a topic: one control-plane row per event (rules 4, 5, 7)."""

    CREATE = "create"
    EXPAND = "expand"
    MARK_DELETION = "mark_deletion"
    RETIRE = "retire"


class PartitionState(PartitionMetadata):
    """A partition as the control plane records it: the log's metadata plus the resize maps."""

    epoch_after_creation: dict[int, int] = Field(default_factory=dict)
    epoch_before_deletion: dict[int, int] = Field(default_factory=dict)
    marked_for_deletion_at: datetime | None = None
    retired_at: datetime | None = None


class TopicRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    topic_version: int
    event: TopicEvent
    location: str
    partition_count: int
    undeleted_partition_count: int
    partitions: list[PartitionState]
    changed_at: datetime = Field(default_factory=utcnow)
    changed_by: str = "lakelog"

    def row(self) -> dict:
        data = self.model_dump()
        data["event"] = self.event.value
        data["partitions"] = [{**p, "mode": p["mode"].value} for p in data["partitions"]]
        return data


TOPIC_SCHEMA = (
    "topic STRING NOT NULL, topic_version INT NOT NULL, event STRING NOT NULL, location STRING NOT NULL, "
    "partition_count INT NOT NULL, undeleted_partition_count INT NOT NULL, "
    "partitions ARRAY<STRUCT<partition: INT, leader_epoch: INT, mode: STRING, "
    "epoch_after_creation: MAP<INT, INT>, epoch_before_deletion: MAP<INT, INT>, "
    "marked_for_deletion_at: TIMESTAMP, retired_at: TIMESTAMP>>, changed_at TIMESTAMP, changed_by STRING"
)


class OffsetCommit(BaseModel):
    """One committed position of a group on a partition (the next offset to deliver)."""

    model_config = ConfigDict(frozen=True)

    group: str
    topic: str
    partition: int
    offset: int
    generation: int = 0
    member_id: str = ""
    committed_at: datetime = Field(default_factory=utcnow)
    metadata: str = ""


OFFSET_SCHEMA = (
    "`group` STRING NOT NULL, topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, "
    "generation INT, member_id STRING, committed_at TIMESTAMP, metadata STRING"
)
