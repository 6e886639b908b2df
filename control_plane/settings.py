"""Consumer-group and controller settings (the ``group`` and ``controller`` sections of the configuration)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from log_store.config import Strict

Assignor = Literal["range", "roundrobin", "sticky", "cooperative-sticky"]
ASSIGNORS: tuple[str, ...] = Assignor.__args__  # the names, in one place


class GroupSettings(Strict):
    """Consumer-group membership (Kafka's group.* and partition.assignment.strategy settings)."""

    protocol: Literal["eager", "cooperative"] = "eager"
    assignor: Assignor = "range"
    session_timeout_ms: int = Field(default=20_000, ge=100)
    heartbeat_interval_ms: int = Field(default=2_000, ge=10)
    rebalance_timeout_ms: int = Field(default=60_000, ge=100)
    # Two-phase hand-over: a partition moving to this member is first a warm-up copy until the
    # member is within ``warmup_max_lag`` records of the owner's committed position.
    warmup: bool = False
    warmup_max_lag: int = Field(default=1_000, ge=0)

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> "GroupSettings":
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"session_timeout_ms ({self.session_timeout_ms}) must be longer than heartbeat_interval_ms "
                f"({self.heartbeat_interval_ms}), or members are expelled between heartbeats"
            )
        return self


class ControllerSettings(Strict):
    """The topic controller: Kafka's ``delete.topic.partition.enable`` switch and retirement delay.

    Shrinking a topic is off by default because it retires partitions; a marked partition is
    retired once drained or ``delete_delay_seconds`` after it was marked (its undelivered
    records are then dropped).
    """

    delete_partition_enable: bool = False
    delete_delay_seconds: float = Field(default=86_400.0, ge=0)
    # A tick merges a partition's small files once they are this many (``topics compact``: two).
    compaction_min_files: int = Field(default=10, ge=2)


class ReplicationSettings(Strict):
    """The ``replication`` section: how far an in-sync follower may fall behind (Kafka's
    replica.lag.max.messages, in records over all partitions), how long one whose copies fail stays
    in the in-sync set (Kafka's replica.lag.time.max.ms, measured by the monotonic clock of the
    process that copies: a following replicator, an ``acks: all`` producer), and a following
    replicator's pause."""

    max_lag_records: int = Field(default=100_000, ge=0)
    max_lag_seconds: float = Field(default=30.0, ge=0)
    interval_seconds: float = Field(default=5.0, gt=0)
