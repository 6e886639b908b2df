"""What a Delta sink holds for a group on a topic: its positions, one application transaction id
per (partition, incarnation), written in the sink's commit with the records (exactly once)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from log_store import commits
from log_store.log_metadata import check_set_transactions_kept
from log_store.names import legacy_sink_id, parse_sink_app_id, sink_app_id


def incarnation_of(incarnations: dict[int, int], partition: int) -> int:
    """A partition's incarnation from ``GroupOffsets.incarnations`` (-1: the group's deletions)."""
    return incarnations.get(partition, incarnations.get(-1, 0))


@dataclass(frozen=True)
class SinkPositions:
    """What a Delta sink holds for one group on one topic: position per (partition, incarnation).

    ``legacy``: positions read from ids in the earlier releases' dotted form, which another
    group/topic pair can share (group ``a`` on ``b.c``, group ``a.b`` on ``c``): each was taken
    only where the sink holds that topic's record just below it. The next sink commit writes them
    again in the JSON form (``carry_over``), after which the dotted ids are no longer read.
    """

    held: dict[tuple[int, int], int] = field(default_factory=dict)
    legacy: dict[tuple[int, int], int] = field(default_factory=dict)

    def current(self, incarnations: dict[int, int] | None) -> dict[int, int]:
        """Position per partition, for each partition's current incarnation."""
        return {p: v for (p, inc), v in self.held.items() if inc == incarnation_of(incarnations or {}, p)}

    def carry_over(self, group: str, topic: str) -> dict[str, int]:
        return {sink_app_id(group, topic, p, inc): v for (p, inc), v in self.legacy.items()}

    @classmethod
    def read(cls, spark: SparkSession, sink_path: str, group: str, topic: str,
             versions: dict[str, int] | None = None) -> "SinkPositions":
        if versions is None:
            txn = commits.start(spark, sink_path, "the sink")
            try:
                check_set_transactions_kept(txn.configuration(), sink_path)
                versions = txn.snapshot_app_versions()
            finally:
                txn.release()
        held = {}
        for app_id, v in versions.items():
            sid = parse_sink_app_id(app_id)
            if sid and sid.group == group and sid.topic == topic:
                held[(sid.partition, sid.incarnation)] = v
        if held:
            return cls(held=held)
        dotted = {pi: v for pi, v in ((legacy_sink_id(a, group, topic), v) for a, v in versions.items()) if pi}
        legacy = _confirmed_in_sink(spark, sink_path, topic, dotted) if dotted else {}
        return cls(held=legacy, legacy=legacy)


def _confirmed_in_sink(spark: SparkSession, sink_path: str, topic: str,
                       positions: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """The dotted-id positions under which the sink holds ``topic``'s record (partition, position - 1):
    the id was written by a batch of this topic, not of another topic whose name joins alike."""
    wanted = F.lit(False)
    for (p, _inc), v in positions.items():
        wanted = wanted | ((F.col("partition") == p) & (F.col("offset") == v - 1))
    found = {(r["partition"], r["offset"]) for r in spark.read.format("delta").load(sink_path)
             .where((F.col("topic") == topic) & wanted).select("partition", "offset").distinct().collect()}
    return {(p, inc): v for (p, inc), v in positions.items() if (p, v - 1) in found}
