"""Consumer groups' committed positions (Kafka's ``__consumer_offsets``, as a Delta table)."""

from __future__ import annotations

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.records import OffsetCommit
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from log_store.errors import InvalidConfigurationError, UnknownGroupError


class PartitionLag(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int
    lag: int


class GroupOffsets:
    """Commit and fetch positions for consumer groups under one root."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.layout = RootLayout(root)
        self.tables = ControlTables(spark, self.layout)

    def commit(self, group: str, topic: str, offsets: dict[int, int], generation: int = 0, member_id: str = "") -> None:
        """Record the next offset to deliver for each partition, in one commit."""
        if not group:
            raise InvalidConfigurationError("a consumer group id must not be empty; pass --group NAME")
        if not offsets:
            return
        rows = [
            OffsetCommit(group=group, topic=topic, partition=p, offset=o, generation=generation, member_id=member_id).model_dump()
            for p, o in sorted(offsets.items())
        ]
        self.tables.append("offset_commits", rows)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """Latest committed offset per partition (empty if the group never committed)."""
        rows = (
            self.tables.read("offset_commits")
            .where((F.col("group") == group) & (F.col("topic") == topic))
            .groupBy("partition")
            .agg(F.max_by("offset", "committed_at").alias("offset"))
            .collect()
        )
        return {r["partition"]: int(r["offset"]) for r in rows}

    def groups(self) -> list[str]:
        rows = self.tables.read("offset_commits").select("group").distinct().collect()
        return sorted(r["group"] for r in rows)

    def describe(self, group: str) -> list[PartitionLag]:
        """Committed offset, log end and lag per partition of every topic the group consumed."""
        commits = self.tables.read("offset_commits").where(F.col("group") == group)
        topics = sorted(r["topic"] for r in commits.select("topic").distinct().collect())
        if not topics:
            raise UnknownGroupError(
                f"unknown group '{group}' under {self.layout.root}: it has never committed; "
                "`lakelog groups list` shows known groups"
            )
        admin = TopicAdmin(self.spark, self.layout.root)
        out: list[PartitionLag] = []
        for topic in topics:
            committed = self.committed(group, topic)
            ends = admin.log(topic).log_end_offsets()
            for p, end in sorted(ends.items()):
                pos = committed.get(p)
                out.append(PartitionLag(topic=topic, partition=p, committed_offset=pos, log_end_offset=end, lag=end - (pos or 0)))
        return out
