"""Retiring marked partitions (rule 7): who has drained them, and deleting their rows afterwards.

The decision is pure (``rules.drained``, ``rules.due``); this module reads what it needs (the
interested groups' committed positions) and purges a retired partition's rows.
"""

from __future__ import annotations

import re

from pyspark.sql import SparkSession

from control_plane.controller.apply import ATTEMPTS
from control_plane.controller.rules import drained
from control_plane.group.offsets import GroupOffsets
from log_store.crash import crash_point
from log_store.engine import retry_on_conflict
from log_store.log_metadata import Mode
from log_store.topic_log import TopicLog

_PARTITION_DIR = re.compile(r"/partition=(-?\d+)/")


def drained_partitions(spark: SparkSession, root: str, topic: str, spans: dict[int, tuple[int, int]]) -> set[int]:
    """Marked partitions (-> [start, end)) every group with an interest in ``topic`` has consumed
    to the end (or that hold nothing). A group has an interest once a member of it subscribed to
    the topic or it committed a position on it, whether it has read the marked partition or not."""
    offsets = GroupOffsets(spark, root)
    return drained(spans, [offsets.committed(group, topic) for group in offsets.interested_groups(topic)])


def partitions_with_rows(spark: SparkSession, location: str) -> set[int]:
    """Partitions that still have data files (from the Delta snapshot: no data is read)."""
    files = spark.read.format("delta").load(location).inputFiles()
    return {int(m.group(1)) for f in files if (m := _PARTITION_DIR.search(f))}


def purge(spark: SparkSession, location: str) -> list[int]:
    """Delete the rows of retired (mode None) partitions that still have any; return those.

    Only offsets below each partition's final end (fixed at its mark) are deleted, so a
    number reused by a later expansion never loses its new rows, which start at that end.
    """
    meta = TopicLog(spark, location).metadata()
    ends = {p: pm.end_offset for p, pm in meta.partitions.items()
            if pm.mode is Mode.NONE and pm.end_offset is not None}
    holding = sorted(set(ends) & partitions_with_rows(spark, location)) if ends else []
    if not holding:
        return []
    ends = {p: ends[p] for p in holding}
    cond = " OR ".join(f"(partition = {p} AND offset < {end})" for p, end in ends.items())
    retry_on_conflict(lambda: spark.sql(f"DELETE FROM delta.`{location}` WHERE {cond}"), ATTEMPTS)
    crash_point("retire:after_purge")
    return holding
