"""Consumer groups' committed positions (Kafka's ``__consumer_offsets``, as a Delta table).

The same table holds the generation fence of every group: a table property
``lakelog.fence.<group>`` that the leader raises when a generation completes. A member's commit
reads that property inside its own Delta transaction; raising it is a metadata change, which
makes every concurrent commit to the table fail and retry. So a commit from an older generation
(an expelled member, a zombie) is always rejected. Ownership claims (acquire, revoke) are rows
of the same fenced kind, so the table's history shows who owned what and when.
"""

from __future__ import annotations

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.records import CommitKind, OffsetCommit, TopicPartition
from control_plane.tables import TABLES, ControlTables
from control_plane.topics import TopicAdmin
from log_store.delta_txn import DeltaTransaction
from log_store.errors import ConcurrentAppendError, IllegalGenerationError, InvalidConfigurationError, UnknownGroupError


def fence_property(group: str) -> str:
    return f"lakelog.fence.{group}"


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
        positions = {TopicPartition(topic=topic, partition=p): o for p, o in offsets.items()}
        self.commit_positions(group, positions, generation, member_id)

    def commit_positions(
        self,
        group: str,
        positions: dict[TopicPartition, int],
        generation: int = 0,
        member_id: str = "",
        kind: CommitKind = CommitKind.COMMIT,
    ) -> None:
        """Commit positions (or claims) in one commit; fenced when ``generation`` > 0.

        Raises IllegalGenerationError when the group's fence is past ``generation``. A member
        outside any group (generation 0, a standalone consumer) commits without the fence.
        """
        if not group:
            raise InvalidConfigurationError("a consumer group id must not be empty; pass --group NAME")
        if not positions:
            return
        rows = [
            OffsetCommit(group=group, topic=tp.topic, partition=tp.partition, offset=o, generation=generation,
                         member_id=member_id, kind=kind.value).model_dump()
            for tp, o in sorted(positions.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
        ]
        if generation <= 0:
            self.tables.append("offset_commits", rows)
            return
        self._fenced(group, rows, generation, member_id, raise_version=None)

    def fence(self, group: str) -> int:
        """The group's current generation fence (0 before its first generation)."""
        if not self.tables.exists("offset_commits"):
            return 0
        conf = DeltaTransaction.start(self.spark, self.tables.path("offset_commits")).configuration()
        return int(conf.get(fence_property(group), 0))

    def raise_fence(self, group: str, generation: int, leader: str) -> bool:
        """Raise the fence to ``generation`` (idempotent); False if it already was there."""
        row = OffsetCommit(group=group, topic="", partition=-1, offset=generation, generation=generation,
                           member_id=leader, kind=CommitKind.GENERATION.value).model_dump()
        return self._fenced(group, [row], generation, leader, raise_version=generation)

    def _fenced(self, group: str, rows: list[dict], generation: int, member_id: str, raise_version: int | None) -> bool:
        self.tables.ensure()
        path = self.tables.path("offset_commits")
        for attempt in range(50):
            txn = DeltaTransaction.start(self.spark, path)
            fence = int(txn.configuration().get(fence_property(group), 0))
            if raise_version is not None and fence >= raise_version:
                return False
            if raise_version is None and fence > generation:
                raise IllegalGenerationError(
                    f"member '{member_id}' of group '{group}' acts on generation {generation}, but the group is "
                    f"on generation {fence}: it was expelled or missed a rebalance; it must rejoin"
                )
            if raise_version is not None:
                txn.set_properties({fence_property(group): str(raise_version)})
            txn.write(self.spark.createDataFrame(rows, TABLES["offset_commits"]))
            try:
                txn.commit({}, f'{{"lakelog": "{rows[0]["kind"]}", "group": "{group}", "generation": {generation}}}')
                return True
            except ConcurrentAppendError:
                continue
        raise ConcurrentAppendError(f"could not commit to group '{group}' after 50 attempts: too much contention")

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """Latest committed offset per partition (empty if the group never committed)."""
        rows = (
            self.tables.read("offset_commits")
            .where((F.col("group") == group) & (F.col("topic") == topic) & (F.col("partition") >= 0) & (F.col("offset") >= 0))
            .groupBy("partition")
            .agg(F.max_by("offset", "committed_at").alias("offset"))
            .collect()
        )
        return {r["partition"]: int(r["offset"]) for r in rows}

    def groups(self) -> list[str]:
        rows = self.tables.read("offset_commits").where("partition >= 0").select("group").distinct().collect()
        return sorted(r["group"] for r in rows)

    def describe(self, group: str) -> list[PartitionLag]:
        """Committed offset, log end and lag per partition of every topic the group consumed."""
        commits = self.tables.read("offset_commits").where((F.col("group") == group) & (F.col("partition") >= 0))
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
