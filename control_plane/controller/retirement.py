"""Retiring marked partitions (rule 7): who has drained them, and deleting their rows afterwards.

The decision is pure (``rules.drained``, ``rules.due``); this module reads what it needs (the
interested groups' committed positions) and purges a retired partition's rows.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from control_plane.controller.apply import ATTEMPTS
from control_plane.controller.rules import drained, unread_by_groups
from control_plane.group.offsets import CONTROLLER, GroupOffsets, owed_expiry
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.rewrites import delete_below
from log_store.log_metadata import Mode
from log_store.topic_log import TopicLog


def drained_partitions(spark: SparkSession, root: str, topic: str, spans: dict[int, tuple[int, int]]) -> set[int]:
    """Marked partitions (-> [start, end)) every group with an interest in ``topic`` has consumed
    to the end (or that hold nothing). A group has an interest once a member of it subscribed to
    the topic or it committed a position on it, whether it has read the marked partition or not."""
    return drained(spans, list(interested_positions(GroupOffsets(spark, root), topic).values()))


def interested_positions(offsets: GroupOffsets, topic: str) -> dict[str, dict[int, int]]:
    """Each group with an interest in ``topic`` -> its committed positions there."""
    return {group: offsets.committed(group, topic) for group in offsets.interested_groups(topic)}


def report_unread(spark: SparkSession, root: str, topic: str, spans: dict[int, tuple[int, int]]) -> dict[str, int]:
    """Before partitions (-> [start, end)) retire past the delete delay: report, for each group
    interested in ``topic`` that holds no position on one, its records expired (never silent: the
    protocol's one exception is reported). Read again here, just before the retirement's record;
    what a group already reported (a retirement retried) is not reported twice. Only groups with a
    position on the topic: one whose interest is rows from before its or the topic's deletion has
    none, and a member subscribed without any reports what it owns through the group protocol.
    Returns the records reported per group."""
    offsets = GroupOffsets(spark, root)
    out = {}
    positions = {group: pos for group, pos in interested_positions(offsets, topic).items() if pos}
    for group, unread in unread_by_groups(spans, positions).items():
        owed = owed_expiry(topic, [(p, start, end) for p, (start, end) in unread.items()], {},
                           offsets.reported_anyhow(group, topic))
        offsets.report_expired(group, owed, member_id=CONTROLLER)
        if owed:
            out[group] = sum(r.end - r.first for r in owed)
    return out


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
