"""Consumer gating around resizes (rules 8-10): what a group may deliver from each partition now.

Every resize is a barrier: the controller bumped the epoch of each undeleted partition p from
e_p (``before``), so records at epoch <= e_p were partitioned with the old count and records
after it with the new one. A barrier is passed once the group's position on every p is past the
last offset of epoch e_p in p (rule 8's lower threshold) and, for a shrink, on every marked
partition has reached its final log end (rule 9). Until then:

- a partition created by the resize (or later) delivers nothing (rule 8);
- a partition in ``before`` delivers only up to the last offset of its epoch e_p (rule 9's upper
  threshold).

The source gates only new partitions (rule 8) and, on a shrink, only the partitions in a
marked partition's map (rule 9). With Kafka's modulo partitioner a resize also moves keys
between two surviving partitions (4 -> 6 sends some keys of partition 1 to partition 3; 4 -> 3
sends some keys of 1 to 2), so lakelog holds each surviving partition's post-bump records behind
the same thresholds too: the source's thresholds, applied to every partition.

A partition number can be retired and later reused. A retirement takes that incarnation out of
every earlier barrier (its records are delivered or reported expired, never waited on again),
so a barrier never mistakes a reused number's new records or new end for the old one's.

The rules are pure functions (``barriers_of``, ``limits``), tested without Spark; ``OffsetGate``
feeds them: the topic's history up to the version the log's metadata was set from (the log is
the commit point), thresholds (the log ends the bumps' commits recorded), marked partitions'
final ends from the same log snapshot a batch is planned on, and the group's positions.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

from control_plane.image import TopicImage
from control_plane.group.offsets import GroupOffsets
from log_store.key_order import Barrier
from log_store.log_metadata import LogSnapshot, Mode

# For tests that must show the audit catches a violation: never set this in production.
DISABLE_ENV = "LAKELOG_UNSAFE_DISABLE_GATING"

Positions = dict[int, int]
_log = logging.getLogger("lakelog.gating")  # DEBUG: every decision (the campaign's actors turn it on)
ThresholdFn = Callable[[int, int], int]


# -- the rules (pure) ----------------------------------------------------------------------------
def barriers_of(image: TopicImage) -> list[Barrier]:
    """The resizes in ``image`` (a topic's history), each pruned of the partition incarnations a
    later record retired."""
    return image.barriers()


def floored(barriers: list[Barrier], threshold: ThresholdFn) -> ThresholdFn:
    """``threshold`` raised to those of the earlier epochs ``barriers`` bumped each partition from.

    The last offset at epochs up to e never falls below the one at an earlier epoch, and the log
    ends the bumps recorded never do; but where a threshold is read from the records the log
    still holds (a bump no end was recorded for), key compaction can remove every record of a
    later epoch's before it is read: read then, it falls below the earlier one read before the
    compaction (cached), and would cap a position already past it, shut for good (campaign seed 4261). The barriers that list a partition name
    one incarnation of it (a retirement prunes the earlier ones), so no threshold of a retired
    incarnation raises a reused number's."""
    epochs: dict[int, set[int]] = {}
    for barrier in barriers:
        for p, e in barrier.before.items():
            epochs.setdefault(p, set()).add(e)

    def at_least_earlier(partition: int, epoch: int) -> int:
        return max([threshold(partition, epoch)]
                   + [threshold(partition, e) for e in epochs.get(partition, ()) if e < epoch])

    return at_least_earlier


def passed(barrier: Barrier, group: Positions, threshold: ThresholdFn, ends: Positions) -> bool:
    """The group is past every pre-resize offset of the barrier and has drained what it marked."""
    return (all(group.get(p, 0) > threshold(p, e) for p, e in barrier.before.items())
            and all(group.get(m, 0) >= ends.get(m, 0) for m in barrier.marked))


def limits(barriers: list[Barrier], own: Positions, group: Positions, threshold: ThresholdFn, ends: Positions,
           passed_versions: set[int]) -> dict[int, int]:
    """For each partition in ``own`` (this member's positions) held back by an unpassed barrier:
    the offset it may deliver up to (exclusive). Adds newly passed barriers to ``passed_versions``."""
    out: dict[int, int] = {}
    threshold = floored(barriers, threshold)
    marked_in = {m: b.version for b in barriers for m in b.marked}
    for barrier in barriers:
        if barrier.version in passed_versions:
            continue
        if passed(barrier, group, threshold, ends):
            passed_versions.add(barrier.version)
            continue
        for p, position in own.items():
            if p in barrier.marked or barrier.version > marked_in.get(p, barrier.version):
                continue  # all of a marked partition's records precede its shrink and later resizes
            cap = threshold(p, barrier.before[p]) + 1 if p in barrier.before else position
            out[p] = min(out.get(p, cap), max(cap, 0))
    return out


def share_limit(positions: Positions, ends: Positions, limit: int) -> dict[int, tuple[int, int]]:
    """Ranges [position, end) to read next, at most ``limit`` records shared evenly over the
    partitions with something below their end (``ends``: log ends, already lowered to the gates'
    limits), in partition order."""
    lags = {p: ends.get(p, 0) - pos for p, pos in positions.items() if ends.get(p, 0) > pos}
    ranges: dict[int, tuple[int, int]] = {}
    remaining = limit
    while lags and remaining > 0:
        share = max(remaining // len(lags), 1)
        for p in sorted(lags):
            take = min(lags[p], share, remaining)
            if take <= 0:
                continue
            start, end = ranges.get(p, (positions[p], positions[p]))
            ranges[p] = (start, end + take)
            lags[p] -= take
            remaining -= take
        lags = {p: lag for p, lag in lags.items() if lag > 0}
    return ranges


# -- feeding the rules ----------------------------------------------------------------------------
class GroupPositions(Protocol):
    """What a gate learns of its group: its committed positions (a group member consuming into a
    sink raises them to the sink's: a member fenced after its sink commit leaves its position only
    there, campaign seed 44), the positions its members published (rule 10), and where to say
    that a shut gate opened (the per-key callback)."""

    def committed(self) -> Positions: ...
    def published(self) -> Positions: ...
    def keys_opened(self, partitions: list[int]) -> None: ...


class CommittedPositions:
    """A consumer that is not a group member: the group's committed positions, nothing published."""

    def __init__(self, offsets: GroupOffsets, group: str, topic: str) -> None:
        self.offsets, self.group, self.topic = offsets, group, topic

    def committed(self) -> Positions:
        return self.offsets.committed(self.group, self.topic)

    def published(self) -> Positions:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


class TopicHistory(Protocol):
    """Where a gate reads a topic's history: ``TopicAdmin``, or a JVM-free reader."""

    def image(self, topic: str) -> TopicImage: ...


class EpochLog(Protocol):
    """Where a gate reads a topic's log: ``TopicLog``, or a JVM-free reader."""

    def snapshot(self) -> LogSnapshot: ...
    def last_offset_of_epoch(self, partition: int, epoch: int) -> int: ...


class OffsetGate:
    """Delivery limits for one group on one topic."""

    def __init__(self, admin: TopicHistory, log: EpochLog, topic: str, group: str, positions: GroupPositions,
                 own_delivered: bool = True) -> None:
        """``own_delivered``: the positions ``limits`` is given are delivered records (lakelog's
        members); False where they are only read ahead (a Kafka client's fetch offsets, whose
        records may sit in its buffer, or be dropped on a revocation): then only the group's
        committed positions pass a barrier."""
        self.admin = admin
        self.own_delivered = own_delivered
        self.log = log
        self.topic = topic
        self.group = group
        self.positions = positions
        self.enabled = os.environ.get(DISABLE_ENV, "") not in ("1", "true")
        self._thresholds: dict[tuple[int, int], int] = {}  # read from the records: rises no end was recorded for
        self._barriers: tuple[int, list[Barrier]] | None = None
        self._passed_versions: set[int] = set()
        self._shut: set[int] = set()
        self._committed: tuple[float, Positions] = (float("-inf"), {})  # (monotonic time read, positions)
        self._seen: LogSnapshot | None = None  # the last snapshot given: thresholds' recorded ends

    def threshold(self, partition: int, epoch: int) -> int:
        """Last offset of ``epoch`` in ``partition`` (rule 3); fixed once the epoch was bumped.

        The log end the bump's commit recorded, less one (``LogSnapshot.end_of_epoch``), read from
        the snapshot the gate judges against, never kept from an earlier one: in one log it is the
        same for every gate whenever it asks, but a replicated topic's gate follows an election to
        the new leader's log, which may have recorded the same rise at its own, lower, log end (the
        old leader's last records, taken with ``acks: 1``, lost). Kept from the old leader, the
        threshold would let records of the new epoch at the lost offsets through before the barrier
        passed, and keep the barrier shut until new records reach those offsets.
        The largest offset of the epoch the log still holds is read only where no end was recorded
        (a bump made by an earlier release), once: key compaction, retention and delete-records can
        remove the epoch's last records, and a gate first asking after that would pass a barrier
        on a position a member whose gate asked before still delivers records below (``floored``
        keeps such a gate from falling below an earlier epoch's). Epochs of a reused partition
        number continue from the retired one's, so (partition, epoch) names one incarnation's records.
        """
        end = (self._seen or self.log.snapshot()).end_of_epoch(partition, epoch)
        if end is not None:
            return end - 1
        key = (partition, epoch)
        if key not in self._thresholds:
            self._thresholds[key] = self.log.last_offset_of_epoch(partition, epoch)
        return self._thresholds[key]

    def barriers(self, topic_version: int) -> list[Barrier]:
        """The resizes in force at ``topic_version`` (the version the log's metadata was set from).
        Cached per version only from a history that reaches it: one read before the log's newest
        resize was recorded would leave that resize out for the version's life."""
        if self._barriers is None or self._barriers[0] != topic_version:
            image = self.admin.image(self.topic)
            found = barriers_of(image.at(topic_version))
            if image.version < topic_version:
                return found
            self._barriers = (topic_version, found)
        return self._barriers[1]

    def watched(self, snap: LogSnapshot | None = None) -> set[int]:
        """Partitions whose group position a shut gate waits on (rule 10's interest)."""
        if not self.enabled:
            return set()
        snap = self._seen = snap or self.log.snapshot()
        out: set[int] = set()
        for b in self.barriers(snap.topic_version):
            if b.version not in self._passed_versions:
                out.update(b.before)
                out.update(b.marked)
        return out

    def _group_positions(self, own: Positions, fresh: bool, watched: set[int]) -> Positions:
        at, committed = self._committed
        if not self.own_delivered:
            own = {}
        if fresh and watched <= set(own):
            fresh = False  # others' committed offsets only matter for partitions it does not hold
        if fresh and time.monotonic() - at > 0.5:
            committed = self.positions.committed()
            self._committed = (time.monotonic(), committed)
        merged = dict(committed)
        for source in (self.positions.published(), own):
            for p, o in source.items():
                merged[p] = max(merged.get(p, -1), o)
        return merged

    def limits(self, positions: Positions, snap: LogSnapshot | None = None) -> dict[int, int]:
        """For each partition in ``positions`` that is gated: the offset it may deliver up to (exclusive)."""
        if not self.enabled:
            return {}
        snap = self._seen = snap or self.log.snapshot()
        barriers = self.barriers(snap.topic_version)
        if not barriers:
            return {}
        ends = {p: pm.end_offset if pm.end_offset is not None else snap.log_ends.get(p, 0)
                for p, pm in snap.metadata.partitions.items() if pm.mode is Mode.READ_ONLY}
        watched = self.watched(snap)
        out = limits(barriers, positions, self._group_positions(positions, False, watched), self.threshold, ends,
                     self._passed_versions)
        if any(out.get(p, positions[p] + 1) <= positions[p] for p in positions):  # a gate is shut: fresher positions
            out = limits(barriers, positions, self._group_positions(positions, True, watched), self.threshold, ends,
                         self._passed_versions)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("group %s at log v%s (topic v%s): positions %s, group %s, marked ends %s, thresholds %s, "
                       "barriers %s, passed %s -> limits %s", self.group, snap.version, snap.topic_version, positions,
                       self._group_positions(positions, False, watched), ends,
                       {(p, e): self.threshold(p, e) for b in barriers for p, e in b.before.items()},
                       [(b.version, b.before, b.marked) for b in barriers], sorted(self._passed_versions), out)
        shut = {p for p in positions if out.get(p, positions[p] + 1) <= positions[p]}
        opened = sorted(p for p in self._shut & set(positions) if p not in shut)
        self._shut = (self._shut - set(positions)) | shut
        if opened:
            self.positions.keys_opened(opened)
        return out


def plan_ranges(gate: OffsetGate, snap: LogSnapshot, positions: Positions, limit: int) -> dict[int, tuple[int, int]]:
    """Ranges [position, end) to read next from ``snap``, at most ``limit`` records shared over
    partitions: ``end`` is the log end, or lower where the resize gates (rules 8, 9) hold a
    partition back. Retired partitions are never read, and no position stays below its
    partition's first readable offset (``LogSnapshot.first_offset``: the records below were
    delivered, or reported expired by the caller first)."""
    readable = set(snap.readable())
    positions = {p: max(o, snap.first_offset(p)) for p, o in positions.items() if p in readable}
    ends = dict(snap.log_ends)
    for p, cap in gate.limits(positions, snap).items():
        ends[p] = min(ends.get(p, 0), cap)
    return share_limit(positions, ends, limit)
