"""Retiring marked partitions (rule 7): who has drained them, and deleting their rows afterwards.

The decision is pure (``rules.drained``, ``rules.due``); this module reads what it needs (the
interested groups' committed positions) and purges a retired partition's rows.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from control_plane.controller.apply import ATTEMPTS
from control_plane.controller.rules import drained
from control_plane.group.offsets import GroupOffsets
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.rewrites import delete_below
from log_store.log_metadata import Mode
from log_store.topic_log import TopicLog


def drained_partitions(spark: SparkSession, root: str, topic: str, spans: dict[int, tuple[int, int]]) -> set[int]:
    """Marked partitions (-> [start, end)) every group with an interest in ``topic`` has consumed
    to the end (or that hold nothing). A group has an interest once a member of it subscribed to
    the topic or it committed a position on it, whether it has read the marked partition or not."""
    offsets = GroupOffsets(spark, root)
    return drained(spans, [offsets.committed(group, topic) for group in offsets.interested_groups(topic)])


def purge(spark: SparkSession, location: str) -> list[int]:
    """Delete the rows of retired (mode None) partitions that still have any; return those.

    Only offsets below each partition's final end (fixed at its mark) are deleted, so a
    number reused by a later expansion never loses its new rows, which start at that end.
    """
    meta = TopicLog(spark, location).metadata()
    ends = {p: pm.end_offset for p, pm in meta.partitions.items()
            if pm.mode is Mode.NONE and pm.end_offset is not None}
    purged: set[int] = set()
    while ends:
        done = retry_on_conflict(lambda: delete_below(spark, location, ends), ATTEMPTS)
        if not done:
            break
        purged.update(done)
    if purged:
        crash_point("retire:after_purge")
    return sorted(purged)
