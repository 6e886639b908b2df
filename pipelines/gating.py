"""Consumer gating around resizes (rules 8-10): what a group may deliver from each partition now.

Every resize is a barrier: the controller bumped the epoch of each undeleted partition p from
e_p (``before``), so records at epoch <= e_p were partitioned with the old count and records
after it with the new one. A barrier is passed once the group's position on every p is past the
last offset of epoch e_p in p (rule 8's lower threshold) and, for a shrink, on every marked
partition has reached its log end (rule 9). Until then:

- a partition created by the resize (or later) delivers nothing (rule 8);
- a partition in ``before`` delivers only up to the last offset of its epoch e_p (rule 9's upper
  threshold).

The source gates only new partitions (rule 8) and, on a shrink, only the partitions in a
marked partition's map (rule 9). With Kafka's modulo partitioner a resize also moves keys
between two surviving partitions (4 -> 6 sends some keys of partition 1 to partition 3; 4 -> 3
sends some keys of 1 to 2), so lakelog holds each surviving partition's post-bump records behind
the same thresholds too: the source's thresholds, applied to every partition.

Positions on partitions this member does not own come from what other members publish in
their heartbeats (rule 10) and, when a gate is shut, from committed offsets. The maps come from
the topic record the log's metadata was last set from (the log is the commit point), so a
threshold is only computed once its bump is in force and never changes: thresholds, marked log
ends and passed barriers are cached. A topic never resized costs nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from control_plane.offsets import GroupOffsets
from pydantic import BaseModel, Field

from control_plane.records import TopicEvent, TopicRecord
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from log_store.delta_txn import DeltaTransaction
from log_store.topic_log import Mode, TopicLog

# For tests that must show the audit catches a violation: never set this in production.
DISABLE_ENV = "LAKELOG_UNSAFE_DISABLE_GATING"
VERSION_PROP = "lakelog.topic_version"

Positions = dict[int, int]
PositionsFn = Callable[[], Positions]


class Barrier(BaseModel):
    """One resize: the epochs it bumped from (``before``) and the partitions it marked."""

    version: int
    before: dict[int, int]
    marked: list[int] = Field(default_factory=list)


class OffsetGate:
    """Delivery limits for one group on one topic."""

    def __init__(self, admin: TopicAdmin, log: TopicLog, topic: str, group: str, offsets: GroupOffsets,
                 published: PositionsFn | None = None, on_open: Callable[[list[int]], None] | None = None) -> None:
        self.admin = admin
        self.log = log
        self.topic = topic
        self.group = group
        self.offsets = offsets
        self.published = published or dict
        self.on_open = on_open or (lambda partitions: None)
        self.enabled = os.environ.get(DISABLE_ENV, "") not in ("1", "true")
        self._record: tuple[int, TopicRecord] | None = None
        self._thresholds: dict[tuple[int, int], int] = {}
        self._ends: dict[int, int] = {}
        self._barriers: tuple[int, list[Barrier]] | None = None
        self._passed_versions: set[int] = set()
        self._shut: set[int] = set()
        self._committed: tuple[float, Positions] = (0.0, {})

    # -- inputs ----------------------------------------------------------------------------
    def record(self) -> TopicRecord:
        """The topic record in force: the version the log's metadata was set from."""
        conf = DeltaTransaction.start(self.admin.spark, self.log.path).configuration()
        version = int(conf.get(VERSION_PROP, "1"))
        if self._record is None or self._record[0] != version:
            history = ControlTables(self.admin.spark, self.admin.layout).read("topics")
            row = history.where((history.topic == self.topic) & (history.topic_version == version)).collect()
            record = TopicRecord.model_validate(row[0].asDict(recursive=True)) if row else self.admin.get(self.topic)
            self._record = (version, record)
        return self._record[1]

    def threshold(self, partition: int, epoch: int) -> int:
        """Last offset of ``epoch`` in ``partition`` (rule 3); fixed once the epoch was bumped."""
        key = (partition, epoch)
        if key not in self._thresholds:
            self._thresholds[key] = self.log.last_offset_of_epoch(partition, epoch)
        return self._thresholds[key]

    def _end(self, partition: int) -> int:
        if partition not in self._ends:  # a marked partition takes no more records: its end is fixed
            self._ends[partition] = self.log.log_end_offsets().get(partition, 0)
        return self._ends[partition]

    def _group_positions(self, own: Positions, fresh: bool) -> Positions:
        at, committed = self._committed
        if fresh and self.watched() <= set(own):
            fresh = False  # others' committed offsets only matter for partitions it does not hold
        if fresh and time.time() - at > 0.5:
            committed = self.offsets.committed(self.group, self.topic)
            self._committed = (time.time(), committed)
        merged = dict(committed)
        for source in (self.published(), own):
            for p, o in source.items():
                merged[p] = max(merged.get(p, -1), o)
        return merged

    # -- barriers -------------------------------------------------------------------------
    def barriers(self) -> list[Barrier]:
        """The resizes in force, oldest first, from the topic's history."""
        record = self.record()
        if self._barriers is not None and self._barriers[0] == record.topic_version:
            return self._barriers[1]
        history = ControlTables(self.admin.spark, self.admin.layout).read("topics")
        rows = history.where((history.topic == self.topic) & (history.topic_version <= record.topic_version)).collect()
        versions = sorted((TopicRecord.model_validate(r.asDict(recursive=True)) for r in rows), key=lambda r: r.topic_version)
        out: list[Barrier] = []
        for prev, cur in zip(versions, versions[1:]):
            was = {p.partition: p for p in prev.partitions}
            if cur.event is TopicEvent.EXPAND:
                created = [p for p in cur.partitions if p.epoch_after_creation
                           and (p.partition not in was or was[p.partition].epoch_after_creation != p.epoch_after_creation)]
                if created:
                    out.append(Barrier(version=cur.topic_version, before=created[0].epoch_after_creation))
            elif cur.event is TopicEvent.MARK_DELETION:
                marked = [p for p in cur.partitions if p.mode is Mode.READ_ONLY
                          and p.partition in was and was[p.partition].mode is Mode.READ_WRITE]
                if marked:
                    out.append(Barrier(version=cur.topic_version, before=marked[0].epoch_before_deletion,
                                       marked=[p.partition for p in marked]))
        self._barriers = (record.topic_version, out)
        return out

    def _passed(self, barrier: Barrier, modes: dict[int, Mode], group: Positions) -> bool:
        if barrier.version in self._passed_versions:
            return True
        ok = all(
            group.get(p, 0) > self.threshold(p, epoch)
            for p, epoch in barrier.before.items() if modes.get(p, Mode.NONE) is not Mode.NONE
        ) and all(
            group.get(m, 0) >= self._end(m) for m in barrier.marked if modes.get(m) is Mode.READ_ONLY
        )
        if ok:
            self._passed_versions.add(barrier.version)
        return ok

    # -- the rules -------------------------------------------------------------------------
    def watched(self) -> set[int]:
        """Partitions whose group position a shut gate waits on (rule 10's interest)."""
        if not self.enabled:
            return set()
        out: set[int] = set()
        for b in self.barriers():
            if b.version not in self._passed_versions:
                out.update(b.before)
                out.update(b.marked)
        return out

    def limits(self, positions: Positions) -> dict[int, int]:
        """For each partition in ``positions`` that is gated: the offset it may deliver up to (exclusive)."""
        if not self.enabled or not self.barriers():
            return {}
        out = self._limits(positions, fresh=False)
        if any(out.get(p, positions[p] + 1) <= positions[p] for p in positions):
            out = self._limits(positions, fresh=True)  # a gate is shut: look at fresher positions
        return out

    def _limits(self, own: Positions, fresh: bool) -> dict[int, int]:
        modes = {p.partition: p.mode for p in self.record().partitions}
        group = self._group_positions(own, fresh)
        was_shut = {p for p in own if self._shut_new(p)}
        out: dict[int, int] = {}
        marked_in = {m: b.version for b in self.barriers() for m in b.marked}
        for barrier in self.barriers():
            if self._passed(barrier, modes, group):
                continue
            for p, position in own.items():
                if p in barrier.marked or (modes.get(p) is Mode.READ_ONLY and barrier.version > marked_in.get(p, barrier.version)):
                    continue  # all of a marked partition's records precede its shrink and later resizes
                cap = self.threshold(p, barrier.before[p]) + 1 if p in barrier.before else position
                out[p] = min(out.get(p, cap), max(cap, 0))
        self._shut = (self._shut - set(own)) | {p for p in own if out.get(p, own[p] + 1) <= own[p]}
        opened = sorted(p for p in was_shut if p not in self._shut)
        if opened:
            self.on_open(opened)
        return out

    def _shut_new(self, p: int) -> bool:
        return p in self._shut
