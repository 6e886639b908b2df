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
import time

from control_plane.group.offsets import GroupOffsets, unreported_expiry
from log_store.log_metadata import LogSnapshot, Mode
from log_store.topic_log import TopicLog
from pipelines.gating import OffsetGate, Positions
from serve.context import ServeContext, TopicView
from serve.group_tables import GroupRecords
from serve.held import ServedRecords

log = logging.getLogger("lakelog.serve")
_KEPT_LOOKS = 1024  # (partition, offset) looks ``past_gaps`` keeps for one log version


class _TopicReads:
    """A topic's history and log as the gates of every group on it read them (``gating.TopicHistory``,
    ``gating.EpochLog``): shared, so what ``past_gaps`` reads is read once per log version for all."""

    def __init__(self, ctx: ServeContext, topic: str, location: str) -> None:
        self.ctx, self.topic, self.location = ctx, topic, location
        self._lock = threading.Lock()
        # log version -> {(partition, offset): the next offset the log holds from there, at most dense}
        self._next: tuple[int, dict[tuple[int, int], int]] = (-1, {})

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
        offset, would otherwise stay below a gate's threshold for good. Then over what key
        compaction removed: to the next record the log still holds, or where its offsets are dense
        again. A group that committed after the last record left before a gap consumed all the gap
        holds, as a Kafka client moved past it by an empty batch has, even when the record a gate's
        threshold names (cached before compaction) is gone. One read for the partitions not looked
        at yet in this log version."""
        snap = self.snapshot()
        out = dict(committed)
        wanted: dict[int, tuple[int, int]] = {}
        for p, pm in snap.metadata.partitions.items():
            if pm.mode is Mode.NONE:
                continue
            at, dense = out.get(p, pm.start_offset), snap.dense_from(p)
            # never committed on: the incarnation's start, not a gate's 0 (a grown-back number's
            # start is the old incarnation's end, whose records may still be in the log, under a threshold)
            out[p] = at = max(at, snap.first_offset(p))
            if snap.first_offset(p) <= at < dense:  # a record at ``dense`` or none: either way no further
                wanted[p] = (at, dense)
        with self._lock:
            known = self._next[1] if self._next[0] == snap.version else {}
        missing = [(p, at, dense + 1) for p, (at, dense) in wanted.items() if (p, at) not in known]
        if missing:
            found = TopicLog(self.ctx.spark, self.location).first_offsets(missing, snap.version)
            new = {(p, at): min(found[p], wanted[p][1]) for p, at, _end in missing}
            if len(known) > _KEPT_LOOKS:  # bounded while a version lasts: this look's alone
                known = {(p, at): known[(p, at)] for p, (at, _dense) in wanted.items() if (p, at) in known}
            known = dict(known) | new
            with self._lock:
                if self._next[0] <= snap.version:
                    self._next = (snap.version, known)
        for p, (at, _dense) in wanted.items():
            out[p] = max(at, known[(p, at)])
        return out


class _Committed:
    """``gating.GroupPositions`` of a Kafka group: its committed offsets on the topic."""

    def __init__(self, records: GroupRecords, group: str, topic: str, reads: _TopicReads | None = None,
                 served: ServedRecords | None = None) -> None:
        """``reads``: the topic's log, to move the offsets over what it no longer holds (a gate's
        view); ``served``: what members may hold there undelivered, not moved over."""
        self.records, self.group, self.topic, self.reads, self.served = records, group, topic, reads, served
        self.high: Positions = {}  # the highest offset read on each partition: what a gate passed on

    def _read(self) -> Positions:
        found = {p: o for (t, p), (o, _epoch) in self.records.committed(self.group).items() if t == self.topic}
        for p, o in found.items():
            self.high[p] = max(self.high.get(p, o), o)
        return found

    def committed(self) -> Positions:
        """The committed offsets, moved over what the log no longer holds after them (``past_gaps``)
        only up to the lowest record a member may still hold undelivered there (``serve.held``): a
        member that fetched records before delete-records, retention or compaction removed them is
        still to deliver them, and a moved key's post-resize record must not reach the group first."""
        found = self._read()
        if self.reads is None:
            return found
        out = self.reads.past_gaps(found)
        if self.served is not None:
            for p, low in self.served.held(self.group, self.topic, self.reads.location, found).items():
                out[p] = min(out.get(p, low), max(low, found.get(p, low)))
        return out

    def went_back(self) -> bool:
        """Whether an offset is now lower than one read before, or gone: the group's offsets were
        reset or deleted since."""
        high = dict(self.high)
        now = self._read()
        return any(now.get(p, -1) < o for p, o in high.items())

    def published(self) -> Positions:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


def _worth_a_look(before: tuple[int, dict[int, int]], version: int, fetched: Positions) -> bool:
    """A newer log version, or a fetch below the log start from lower than any checked since the
    last version (a fetch planned on an older view too: its client skips from there)."""
    looked_version, lowest = before
    return version > looked_version or any(offset < lowest.get(p, offset + 1) for p, offset in fetched.items())


class _Gate:
    """A group's gate on a topic incarnation, and the group's committed offsets it reads."""

    def __init__(self, gate: OffsetGate, committed: _Committed) -> None:
        self.gate, self.committed, self.lock = gate, committed, threading.Lock()
        self.checked = float("-inf")  # its first use looks whether the offsets went back


class KafkaGates:
    """One gate per (group, topic incarnation) that members of groups here fetch from."""

    # how often a gate looks whether its group's offsets went back: at every fetch (a listing of
    # offset_commits' log; its rows are read once per version), since a group reset and joined again
    # fetches within a fraction of a second of its last fetch before the reset
    reset_check_s = 0.0
    idle_s = 600.0  # an entry of a group and topic not fetched for that long is dropped
    prune_every_s = 60.0

    def __init__(self, ctx: ServeContext, records: GroupRecords) -> None:
        self.ctx, self.records = ctx, records
        self.served = ServedRecords()  # what members hold undelivered: not passed over by ``past_gaps``
        self._reads: dict[tuple[str, str], _TopicReads] = {}  # (topic, location): shared by its groups' gates
        self._gates: dict[tuple[str, str, str], _Gate] = {}
        self._lock = threading.Lock()
        # (group, topic, location) -> the newest log version checked for expiry, and the lowest
        # offset per partition a fetch below the log start was checked from since: one entry per
        # group and topic, however many offsets a client fetches from
        self._looked: dict[tuple[str, str, str], tuple[int, dict[int, int]]] = {}
        self._reporting: dict[tuple[str, str, str], threading.Lock] = {}  # one look of a group at a topic at a time
        self._used: dict[tuple[str, str, str], float] = {}  # when each (group, topic, location) was last asked about
        self._pruned = time.monotonic()

    def _new_gate(self, group: str, view: TopicView) -> _Gate:
        """Under ``_lock``."""
        where = (view.name, view.record.location)
        reads = self._reads.get(where)
        if reads is None:
            reads = self._reads[where] = _TopicReads(self.ctx, view.name, view.record.location)
        committed = _Committed(self.records, group, view.name, reads, self.served)
        return _Gate(OffsetGate(reads, reads, view.name, group, committed, own_delivered=False), committed)

    def _gate(self, group: str, view: TopicView) -> _Gate:
        key = (group, view.name, view.record.location)
        with self._lock:
            self._used[key] = time.monotonic()
            if key not in self._gates:
                self._gates[key] = self._new_gate(group, view)
            return self._gates[key]

    def _went_back(self, key: tuple[str, str, str], entry: _Gate, view: TopicView) -> bool:
        """Whether the group's committed offsets on the topic went back below any its gate read
        (DeleteGroups, AlterConsumerGroupOffsets, ``lakelog groups reset``, here or in another
        process); if so the gate is made anew: the barriers it passed are passed again only by the
        offsets now committed, as a new group's. Under the entry's lock."""
        if time.monotonic() - entry.checked < self.reset_check_s:
            return False
        back = entry.committed.went_back()
        entry.checked = time.monotonic()
        if not back:
            return False
        log.info("the offsets of group %s on %s went back: its resize gates start over", key[0], key[1])
        with self._lock:
            if self._gates.get(key) is entry:
                self._gates[key] = self._new_gate(key[0], view)
        return True

    def forget(self, group: str) -> None:
        """Drop ``group``'s gates and expiry looks (deleted, or its offsets set from outside it)."""
        with self._lock:
            for key in [k for k in self._gates if k[0] == group]:
                del self._gates[key]
            for key in [k for k in self._looked if k[0] == group]:
                del self._looked[key]
        self.served.forget(group)

    def prune(self, force: bool = False) -> None:
        """Drop the entries of groups and topics (incarnations) not asked about for ``idle_s``: a
        gate is made again from the group's committed offsets, an expiry look looked again."""
        now = time.monotonic()
        with self._lock:
            if not force and now - self._pruned < self.prune_every_s:
                return
            self._pruned = now
            for key in [k for k, at in self._used.items() if now - at >= self.idle_s]:
                gate, reporting = self._gates.get(key), self._reporting.get(key)
                if (gate is not None and gate.lock.locked()) or (reporting is not None and reporting.locked()):
                    continue
                for table in (self._gates, self._looked, self._reporting, self._used):
                    table.pop(key, None)
            used = {(k[1], k[2]) for k in self._used}
            for where in [w for w in self._reads if w not in used]:
                del self._reads[where]

    def limits(self, groups: list[str], view: TopicView, offsets: Positions) -> dict[int, int]:
        """For each partition of ``offsets`` (fetch offsets) some of ``groups`` may not read to its
        end: the offset it may read up to (exclusive), the lowest the groups allow."""
        self.prune()
        out: dict[int, int] = {}
        for group in groups:
            found = None
            while found is None:
                entry = self._gate(group, view)
                with entry.lock:
                    if not self._went_back((group, view.name, view.record.location), entry, view):
                        found = entry.gate.limits(offsets, view.snapshot)
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
            self._used[topic_key] = time.monotonic()
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
