"""The rows of the control-plane tables, one pydantic model per kind.

The tables are append-only record logs (Kafka's metadata log, in Delta): a topic row is the
whole state of one topic after one change, numbered by ``topic_version``; an offset-commit row
is one committed position. Current state is the latest row; history is every row.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from log_store.log_metadata import PartitionMetadata


MAX_PARTITIONS = 10_000  # the most partitions a topic keeps


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class TopicEvent(str, Enum):
    """What changed a topic: one control-plane row per event (rules 4, 5, 7)."""

    CREATE = "create"
    EXPAND = "expand"
    MARK_DELETION = "mark_deletion"
    RETIRE = "retire"
    DELETING = "deleting"  # topics delete began: the log is fenced next, then emptied
    DELETED = "deleted"  # the topic is gone; a topic created again with the name is a new incarnation
    ELECT_LEADER = "elect_leader"  # a replicated topic's leader moved: its location is the new leader's log

    @property
    def removes_topic(self) -> bool:
        return self in (TopicEvent.DELETING, TopicEvent.DELETED)


class PartitionState(PartitionMetadata):
    """A partition as the control plane records it: the log's metadata plus the resize maps."""

    epoch_after_creation: dict[int, int] = Field(default_factory=dict)
    epoch_before_deletion: dict[int, int] = Field(default_factory=dict)
    marked_for_deletion_at: datetime | None = None

    @field_validator("epoch_after_creation", "epoch_before_deletion", mode="before")
    @classmethod
    def _pairs(cls, value):
        """Arrow (delta-rs) reads a map as a list of (key, value) pairs; Spark as a dict."""
        return dict(value) if isinstance(value, list) else (value or {})
    retired_at: datetime | None = None


class TopicRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    topic_version: int
    event: TopicEvent
    location: str
    partition_count: int  # in the assignment: undeleted and marked partitions, not retired ones
    undeleted_partition_count: int  # what producers partition keys over (0..count-1)
    partitions: list[PartitionState]  # every number ever used, retired ones included (mode None)
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
    "start_offset: BIGINT, end_offset: BIGINT, "
    "epoch_after_creation: MAP<INT, INT>, epoch_before_deletion: MAP<INT, INT>, "
    "marked_for_deletion_at: TIMESTAMP_NTZ, retired_at: TIMESTAMP_NTZ>>, changed_at TIMESTAMP_NTZ, changed_by STRING"
)


class EpochStart(BaseModel):
    """Where a leader epoch began: its leader root and the first offset of each partition written
    under it (Kafka's leader-epoch cache). A follower holding records of an older epoch truncates
    to the start of the epoch after it."""

    model_config = ConfigDict(frozen=True)

    epoch: int
    leader: str
    starts: dict[int, int] = Field(default_factory=dict)

    @field_validator("starts", mode="before")
    @classmethod
    def _pairs(cls, value):
        return dict(value) if isinstance(value, list) else (value or {})


class ReplicaEvent(str, Enum):
    """What changed a replicated topic's replica state: one ``topic_replicas`` row each."""

    CREATE = "create"
    ELECT = "elect"  # a new leader and leader epoch
    SHRINK_ISR = "shrink_isr"  # a follower fell behind (or could not be reached)
    JOIN = "join"  # a caught-up follower starts joining: acknowledgements and the high watermark wait for it
    EXPAND_ISR = "expand_isr"  # a joining follower holds what the leader had since: it is in sync
    REASSIGN = "reassign"  # the assigned roots changed


class ReplicaState(BaseModel):
    """A replicated topic's replicas after one change (numbered ``replica_version`` within the
    topic's incarnation, the version of its create record): assigned roots (the first is the
    preferred leader), the leader root and leader epoch, the in-sync set, and where each epoch
    began. The topic's record names the leader's log as its location."""

    model_config = ConfigDict(frozen=True)

    topic: str
    incarnation: int
    replica_version: int
    event: ReplicaEvent
    replicas: list[str]
    leader: str
    leader_epoch: int
    in_sync: list[str]
    epoch_starts: list[EpochStart]
    changed_at: datetime = Field(default_factory=utcnow)
    joining: list[str] = Field(default_factory=list)  # caught up, joining the in-sync set (docs/replication.md)

    @field_validator("joining", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value  # a row written before the column
    changed_by: str = "lakelog"

    @property
    def followers(self) -> list[str]:
        return [r for r in self.replicas if r != self.leader]

    def row(self) -> dict:
        data = self.model_dump()
        data["event"] = self.event.value
        return data


REPLICA_SCHEMA = (
    "topic STRING NOT NULL, incarnation INT NOT NULL, replica_version INT NOT NULL, event STRING NOT NULL, "
    "replicas ARRAY<STRING>, leader STRING, leader_epoch INT, in_sync ARRAY<STRING>, "
    "epoch_starts ARRAY<STRUCT<epoch: INT, leader: STRING, starts: MAP<INT, BIGINT>>>, "
    "changed_at TIMESTAMP_NTZ, changed_by STRING, joining ARRAY<STRING>"
)


class ExpiredRange(BaseModel):
    """Records [first, end) of a retired partition that a group can no longer deliver: the
    partition was retired (its deletion delay passed) before the group read that far."""

    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    first: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.first

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} offsets {self.first}..{self.end - 1} ({self.records} records)"


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
    kind: str = "commit"
    end_offset: int | None = None  # kind "expired": the records [offset, end_offset) can no longer be delivered
    commit_order: int | None = None  # set when written: see control_plane.tables.COMMIT_ORDER_COLUMN
    # the partition's leader epoch the position was read under (Kafka's committed leader epoch):
    # after an unclean election, where the position's history was cut (docs/replication.md)
    leader_epoch: int | None = None


OFFSET_SCHEMA = (
    "`group` STRING NOT NULL, topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, "
    "generation INT, member_id STRING, committed_at TIMESTAMP_NTZ, metadata STRING, kind STRING, end_offset BIGINT, "
    "commit_order BIGINT, leader_epoch INT"
)


# -- consumer groups ------------------------------------------------------------------------
TP_DDL = "STRUCT<topic: STRING, partition: INT>"


class TopicPartition(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class CommitKind(str, Enum):
    """Rows of ``offset_commits``: positions, ownership claims, and generation fences."""

    COMMIT = "commit"
    ACQUIRE = "acquire"
    REVOKE = "revoke"
    GENERATION = "generation"
    EXPIRED = "expired"  # records of a retired partition the group can no longer deliver
    RESET = "reset"  # an operator moved the position (groups reset-offsets)
    DELETED = "deleted"  # an operator deleted the group (groups delete): earlier positions no longer count
    TOPIC_DELETED = "topic_deleted"  # the topic was deleted (group ""): no group's earlier position on it counts


class MemberState(str, Enum):
    JOINING = "joining"
    STABLE = "stable"
    LEFT = "left"


class PartitionPosition(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    offset: int


class MemberHeartbeat(BaseModel):
    """One heartbeat of a member: who it is, what it joins or owns (Kafka's JoinGroup/Heartbeat)."""

    model_config = ConfigDict(frozen=True, use_enum_values=True)

    group: str
    member_id: str
    state: MemberState
    generation: int  # the generation the member has adopted (0: none yet)
    joining: int | None = None  # the generation it is joining, while a rebalance runs
    protocol: str = "eager"
    assignor: str = "range"
    topics: list[str] = Field(default_factory=list)
    owned: list[TopicPartition] = Field(default_factory=list)
    previous: list[TopicPartition] = Field(default_factory=list)  # last assignment (sticky's memory)
    warm_ready: list[TopicPartition] = Field(default_factory=list)
    warmup: bool = False
    positions: list[PartitionPosition] = Field(default_factory=list)
    session_timeout_ms: int = 20_000
    rebalance_timeout_ms: int = 60_000
    unassigned_ms: int = 0
    rebalances: int = 0
    heartbeat_at: datetime = Field(default_factory=utcnow)  # the writer's clock: shown, never compared
    host: str = ""
    beat: int = 0  # the member's heartbeat counter: liveness is a counter observed to move
    commit_order: int | None = None  # set when written: see control_plane.tables.COMMIT_ORDER_COLUMN
    # the partition's leader epoch the position was read under (Kafka's committed leader epoch):
    # after an unclean election, where the position's history was cut (docs/replication.md)
    leader_epoch: int | None = None


class MemberAssignment(BaseModel):
    model_config = ConfigDict(frozen=True)

    member_id: str
    partitions: list[TopicPartition] = Field(default_factory=list)
    warmups: list[TopicPartition] = Field(default_factory=list)


class Handover(BaseModel):
    """A warmed-up partition moving directly: the new owner starts once the old one revoked it."""

    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    from_member: str
    to_member: str


class GenerationMember(BaseModel):
    model_config = ConfigDict(frozen=True)

    member_id: str
    protocol: str
    topics: list[str]
    owned: list[TopicPartition] = Field(default_factory=list)


class GenerationRecord(BaseModel):
    """One generation of a group: its members and the leader's assignment (Kafka's SyncGroup)."""

    model_config = ConfigDict(frozen=True)

    group: str
    generation: int
    protocol: str  # eager, cooperative, or mixed (members on both during an upgrade)
    assignor: str
    leader: str
    members: list[GenerationMember]
    assignment: list[MemberAssignment]
    partitions: list[TopicPartition] = Field(default_factory=list)  # undeleted, as assigned
    marked: list[TopicPartition] = Field(default_factory=list)  # marked for deletion (rule 11)
    handovers: list[Handover] = Field(default_factory=list)
    revoked: int = 0  # partitions members give up in this rebalance
    rebalance_ms: int = 0
    reason: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    topic_versions: dict[str, int] = Field(default_factory=dict)  # the topic versions the leader planned with
    expired: list[ExpiredRange] = Field(default_factory=list)  # records retired before the group read them

    @field_validator("topic_versions", mode="before")
    @classmethod
    def _pairs(cls, value):
        """Arrow (delta-rs) reads a map as a list of (key, value) pairs; Spark as a dict."""
        return dict(value) if isinstance(value, list) else (value or {})

    def partitions_of(self, member_id: str) -> list[TopicPartition]:
        return next((a.partitions for a in self.assignment if a.member_id == member_id), [])

    def warmups_of(self, member_id: str) -> list[TopicPartition]:
        return next((a.warmups for a in self.assignment if a.member_id == member_id), [])

    def member_ids(self) -> set[str]:
        return {m.member_id for m in self.members}

    def owner(self) -> dict[TopicPartition, str]:
        return {tp: a.member_id for a in self.assignment for tp in a.partitions}


MEMBER_SCHEMA = (
    f"`group` STRING NOT NULL, member_id STRING NOT NULL, state STRING NOT NULL, generation INT NOT NULL, "
    f"joining INT, protocol STRING, assignor STRING, topics ARRAY<STRING>, owned ARRAY<{TP_DDL}>, "
    f"previous ARRAY<{TP_DDL}>, warm_ready ARRAY<{TP_DDL}>, warmup BOOLEAN, "
    "positions ARRAY<STRUCT<topic: STRING, partition: INT, offset: BIGINT>>, session_timeout_ms INT, "
    "rebalance_timeout_ms INT, unassigned_ms BIGINT, rebalances INT, heartbeat_at TIMESTAMP_NTZ, host STRING, beat BIGINT, "
    "commit_order BIGINT, leader_epoch INT"
)

GENERATION_SCHEMA = (
    "`group` STRING NOT NULL, generation INT NOT NULL, protocol STRING, assignor STRING, leader STRING, "
    f"members ARRAY<STRUCT<member_id: STRING, protocol: STRING, topics: ARRAY<STRING>, owned: ARRAY<{TP_DDL}>>>, "
    f"assignment ARRAY<STRUCT<member_id: STRING, partitions: ARRAY<{TP_DDL}>, warmups: ARRAY<{TP_DDL}>>>, "
    f"partitions ARRAY<{TP_DDL}>, marked ARRAY<{TP_DDL}>, "
    "handovers ARRAY<STRUCT<topic: STRING, partition: INT, from_member: STRING, to_member: STRING>>, "
    "revoked INT, rebalance_ms BIGINT, reason STRING, created_at TIMESTAMP_NTZ, topic_versions MAP<STRING, INT>, "
    "expired ARRAY<STRUCT<topic: STRING, partition: INT, first: BIGINT, end: BIGINT>>"
)


# -- servers (lakelog serve) ---------------------------------------------------------------------
class ServerRecord(BaseModel):
    """A Kafka-protocol server over the root, one row per change of its state (``up`` when it
    starts listening, ``down`` when it stops); ``commit_order`` orders them (never a clock)."""

    model_config = ConfigDict(frozen=True)

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listener: str = "PLAINTEXT"  # its security protocol: a client is told of the servers it can speak to
    state: str = "up"
    changed_at: datetime = Field(default_factory=utcnow)  # the writer's clock: shown, never compared
    commit_order: int | None = None


SERVER_SCHEMA = ("node_id INT NOT NULL, host STRING NOT NULL, port INT NOT NULL, rack STRING, listener STRING, "
                 "state STRING NOT NULL, "
                 "changed_at TIMESTAMP_NTZ, commit_order BIGINT")
