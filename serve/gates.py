"""lakelog's resize gates for Kafka consumer groups (docs/serve.md "Consumer groups across a
resize"): a fetch from a member of a group this server coordinates reads each partition only up
to the offset the gates let that group deliver (``pipelines.gating.OffsetGate``, rules 8-9), so a
grown partition, and every partition's post-resize records, reach the group only once it has
committed, on every partition, the records produced before the resize, and drained what a shrink
marked. A Kafka client reads ahead of what it delivers (its fetch buffer, a revoked partition's
records dropped), so only the group's committed offsets pass a barrier, never fetch offsets.

Also the group's expired records: what a retirement, retention or delete-records removed below its
committed offsets is reported in lakelog's group tables (``expired_records``) once.

Blocking: called on the pool.
"""

from __future__ import annotations

import logging
import threading

from control_plane.group.offsets import GroupOffsets, unreported_expiry
from log_store.log_metadata import LogSnapshot, Mode
from log_store.topic_log import TopicLog
from pipelines.gating import OffsetGate, Positions
from serve.context import ServeContext, TopicView
from serve.group_tables import GroupRecords

log = logging.getLogger("lakelog.serve")


class _TopicReads:
    """A topic's history and log as a gate reads them (``gating.TopicHistory``, ``gating.EpochLog``)."""

    def __init__(self, ctx: ServeContext, topic: str, location: str) -> None:
        self.ctx, self.topic, self.location = ctx, topic, location

    def image(self, topic: str):
        return self.ctx.admin.image(topic)

    def snapshot(self) -> LogSnapshot:
        return self.ctx.view(self.topic).snapshot

    def last_offset_of_epoch(self, partition: int, epoch: int) -> int:
        return TopicLog(self.ctx.spark, self.location).last_offset_of_epoch(partition, epoch)

    def past_gaps(self, committed: Positions) -> Positions:
        """``committed`` (a partition never committed on: its incarnation's start) moved over what
        the log no longer holds after it. Below the partition's first readable offset (retention or
        delete-records raised the log start, or the number was retired and grown back), to that
        offset: the group can deliver nothing below it (what it owed there is reported expired:
        ``report_expired``), as lakelog's own consumers move their positions
        (``gating.plan_ranges``); a group that never committed there, reset to the earliest
        offset, would otherwise stay below a gate's threshold for good. Then over what key compaction removed: to the next record the
        log still holds, or where its offsets are dense again. A group that committed after the
        last record left before a gap consumed all the gap holds, as a Kafka client moved past it
        by an empty batch has, even when the record a gate's threshold names (cached before
        compaction) is gone."""
        snap = self.snapshot()
        log = TopicLog(self.ctx.spark, self.location)
        out = dict(committed)
        for p, pm in snap.metadata.partitions.items():
            if pm.mode is Mode.NONE:
                continue
            at, dense = out.get(p, pm.start_offset), snap.dense_from(p)
            if at < snap.first_offset(p):
                out[p] = at = snap.first_offset(p)
            if snap.first_offset(p) <= at < dense:  # a record at ``dense`` or none: either way no further
                moved = min(log.end_after_records(p, at, dense + 1, 1, snap.version) - 1, dense)
                if moved > at:
                    out[p] = moved
        return out


class _Committed:
    """``gating.GroupPositions`` of a Kafka group: its committed offsets on the topic."""

    def __init__(self, records: GroupRecords, group: str, topic: str, reads: _TopicReads | None = None) -> None:
        """``reads``: the topic's log, to move the offsets over compaction's gaps (a gate's view)."""
        self.records, self.group, self.topic, self.reads = records, group, topic, reads

    def committed(self) -> Positions:
        found = {p: o for (t, p), (o, _epoch) in self.records.committed(self.group).items() if t == self.topic}
        return self.reads.past_gaps(found) if self.reads is not None else found

    def published(self) -> Positions:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


def _worth_a_look(before: tuple[int, dict[int, int]], version: int, fetched: Positions) -> bool:
    """A newer log version, or a fetch below the log start from lower than any checked since the
    last version (a fetch planned on an older view too: its client skips from there)."""
    looked_version, lowest = before
    return version > looked_version or any(offset < lowest.get(p, offset + 1) for p, offset in fetched.items())


class KafkaGates:
    """One gate per (group, topic incarnation) that members of groups here fetch from."""

    def __init__(self, ctx: ServeContext, records: GroupRecords) -> None:
        self.ctx, self.records = ctx, records
        self._gates: dict[tuple[str, str, str], tuple[OffsetGate, threading.Lock]] = {}
        self._lock = threading.Lock()
        # (group, topic, location) -> the newest log version checked for expiry, and the lowest
        # offset per partition a fetch below the log start was checked from since: one entry per
        # group and topic, however many offsets a client fetches from
        self._looked: dict[tuple[str, str, str], tuple[int, dict[int, int]]] = {}
        self._reporting: dict[tuple[str, str, str], threading.Lock] = {}  # one look of a group at a topic at a time

    def _gate(self, group: str, view: TopicView) -> tuple[OffsetGate, threading.Lock]:
        key = (group, view.name, view.record.location)
        with self._lock:
            if key not in self._gates:
                reads = _TopicReads(self.ctx, view.name, view.record.location)
                committed = _Committed(self.records, group, view.name, reads)
                gate = OffsetGate(reads, reads, view.name, group, committed, own_delivered=False)
                self._gates[key] = (gate, threading.Lock())
            return self._gates[key]

    def limits(self, groups: list[str], view: TopicView, offsets: Positions) -> dict[int, int]:
        """For each partition of ``offsets`` (fetch offsets) some of ``groups`` may not read to its
        end: the offset it may read up to (exclusive), the lowest the groups allow."""
        out: dict[int, int] = {}
        for group in groups:
            gate, lock = self._gate(group, view)
            with lock:
                found = gate.limits(offsets, view.snapshot)
            for p, cap in found.items():
                out[p] = min(out.get(p, cap), cap)
        return out

    def report_expired(self, group: str, view: TopicView, fetched: Positions | None = None) -> None:
        """Report, once, the records the log no longer holds that ``group`` neither delivered nor
        reported (below its committed offsets, or all of a partition retired since its view began
        that it never committed on), as lakelog's consumers do. ``fetched``: offsets a member
        fetched from below the log start. Its client resets past the gap (``auto.offset.reset``)
        whatever the group committed, often nothing yet (it fetches ahead of its commits), so
        the group stands no higher than there."""
        fetched = fetched or {}
        topic_key = (group, view.name, view.record.location)  # a topic made again starts at 0
        version = view.snapshot.version
        with self._lock:
            reporting = self._reporting.setdefault(topic_key, threading.Lock())
        # one look of a group at a topic at a time, each reading what the one before it reported (a
        # rebalance's and a fetch's race); a look is recorded only once made, so a fetch meeting a
        # look under way waits for it, and looks again if it failed
        with reporting:
            with self._lock:
                before = self._looked.get(topic_key)
            if before is not None and not _worth_a_look(before, version, fetched):
                return
            self._report(group, view, fetched)
            newer = before is None or version > before[0]
            lowest = {} if newer else dict(before[1])
            for p, offset in fetched.items():
                lowest[p] = min(lowest.get(p, offset), offset)
            with self._lock:
                self._looked[topic_key] = (version if newer else before[0], lowest)

    def _report(self, group: str, view: TopicView, fetched: Positions) -> None:
        positions = _Committed(self.records, group, view.name).committed()
        for p, offset in fetched.items():
            positions[p] = min(positions.get(p, offset), offset)
        offsets = GroupOffsets(self.ctx.spark, self.ctx.root)
        upto = view.snapshot.topic_version
        first = self.records.tables.view_start(group, view.name)
        # partitions retired since the group's view began that it never committed on: all skipped
        since = None if first is None else (lambda: self.ctx.admin.image(view.name).retired_between(first, upto))
        ranges = unreported_expiry(
            view.name, view.snapshot, list(positions), positions,
            lambda: self.ctx.admin.image(view.name).retired_between(-1, upto),
            lambda: offsets.expired(group, view.name), since)
        offsets.report_expired(group, ranges, member_id="lakelog-serve")

    def report_expired_on(self, group: str, topics: list[str]) -> None:
        """``report_expired`` on each of ``topics`` (a rebalance: a retirement changed the partitions)."""
        for topic in topics:
            try:
                self.report_expired(group, self.ctx.view(topic))
            except Exception:  # noqa: BLE001 - reported at the next rebalance or fetch
                log.exception("reporting expired records of %s on %s failed", group, topic)
