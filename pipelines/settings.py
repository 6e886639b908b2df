"""Producer and consumer settings (the ``producer`` and ``consumer`` sections of the configuration)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from log_store.config import Strict


class ProducerSettings(Strict):
    batch_size: int = Field(default=500_000, ge=1)
    max_retries: int = Field(default=20, ge=0)
    retry_backoff_ms: int = Field(default=50, ge=0)
    # How long a batch may wait for a lost leader root (its return or an election) before the
    # produce fails (Kafka's delivery.timeout.ms): pipelines/waits.py. Retries of conflicts and
    # stale metadata count against max_retries instead.
    delivery_timeout_ms: int = Field(default=120_000, ge=0)
    # A replicated topic's acknowledgement (docs/replication.md): "1" once the leader root committed
    # the records, "all" once every in-sync root holds them too, with at least min_insync_replicas
    # roots in the in-sync set. Unreplicated topics ignore both.
    acks: Literal["1", "all"] = "1"
    min_insync_replicas: int = Field(default=1, ge=1)


class ConsumerSettings(Strict):
    max_records_per_batch: int = Field(default=500_000, ge=1)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    # Into a sink, every batch's commit already holds its positions (the sink's application
    # versions): the group's offsets row follows at most this often, and at the end of a run
    # (Kafka's auto.commit.interval.ms). 0: after every batch. Without a sink: after every batch.
    offsets_commit_interval_ms: int = Field(default=5000, ge=0)
    # How long a consumer waits for a topic's lost leader root (its return or an election) before
    # it fails (pipelines/waits.py); Kafka's consumers wait without end, a lakelog consume is a job.
    leader_wait_timeout_ms: int = Field(default=300_000, ge=0)
    # A replicated topic's reads (docs/replication.md): only below the high watermark, what every
    # root that may be elected cleanly holds, as Kafka's consumers read. Unreplicated topics read
    # up to the log end.
    isolation: Literal["replicated"] = "replicated"
    # Kafka's isolation.level (docs/concepts.md): read_uncommitted delivers every record, open and
    # aborted transactions' too; read_committed stops at the last stable offset and leaves aborted
    # transactions' records out. Neither delivers a marker.
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"

    @field_validator("isolation", mode="before")
    @classmethod
    def _no_reads_above_the_high_watermark(cls, value: Any) -> Any:
        if value == "leader":
            raise ValueError("'leader' (reads up to the leader's log end) is gone: records above the high watermark "
                             "can be taken back by a failover, and a consumer would have delivered them. Consumers "
                             "read below the high watermark; remove the setting (docs/replication.md)")
        return value
