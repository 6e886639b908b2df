"""Planning a ``format("lakelog")`` read on the driver (``pipelines.spark.bridge``): which topics
and partitions a read covers, where it starts, where each micro-batch of a stream ends under the
resize gates, and what each batch reads (``reads``: offset ranges of a log at one version, which
``pipelines.spark.reading`` turns into rows). Reads the root with delta-rs; the driver's Spark
session commits a group's positions.

A root may be local or in an object store delta-rs reads (``rs_reader.SCHEMES``). The read's
``storage.*`` options travel in the planner and in every ``TopicRead``, so the driver's plans and
the tasks' reads open the store alike.

Where a snapshot's log ends are decided for a read: ``Planner.topics`` (each topic's
``TopicNow.snap``, read by ``rs_reader.log_snapshot``); every plan takes its ends from there.
What a stream skipped is decided and reported in ``pipelines.spark.losses``.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from control_plane.fast_reads import FastTopicReader
from control_plane.image import TopicImage
from control_plane.records import ExpiredRange, TopicRecord
from log_store import rs_reader
from log_store.delta_errors import lost_root
from log_store.errors import LOST_ROOT, InvalidConfigurationError, LakelogError, LeaderNotAvailableError, leader_unavailable
from log_store.files import is_remote
from log_store.log_metadata import LogSnapshot
from log_store.txn_reads import stable_view
from pipelines.gating import OffsetGate, plan_ranges
from pipelines.spark.offsets import StreamOffset, TopicOffset
from pipelines.spark.losses import Losses, member_id
from pipelines.spark.options import LEADER_WAIT_TIMEOUT, SourceOptions
from pipelines.waits import LostRootWait
from pipelines.spark.reading import DataLossError, TopicRead, with_aborted
from pipelines.spark.specs import OffsetSpec, TimestampSpec
from pipelines.spark.tasks import share_by_lag
from pipelines.spark.positions import (
    behind_latest, bounds_to_read, check_start_in_open_transaction, ending_positions, in_open_transaction,
    resolve_topics, starting_positions, timestamp_targets,
)

UNLIMITED = 2**62

Positions = dict[int, int]


__all__ = ["DataLossError", "Planner", "TopicRead", "UNLIMITED"]


# -- JVM-free reads for the gate ------------------------------------------------------------------
class _TopicReads:
    """One topic's history and log as the gate reads them (``gating.TopicHistory`` and
    ``gating.EpochLog``), through delta-rs."""

    def __init__(self, image: TopicImage, location: str, storage: rs_reader.Storage) -> None:
        self._image, self.location, self.storage = image, location, storage

    def image(self, topic: str) -> TopicImage:
        return self._image

    def snapshot(self) -> LogSnapshot:
        return rs_reader.log_snapshot(self.location, storage=self.storage)[0]

    def last_offset_of_epoch(self, partition: int, epoch: int) -> int:
        return rs_reader.last_offset_of_epoch(self.location, partition, epoch, storage=self.storage)


class _OwnPositions:
    """``gating.GroupPositions`` of a stream: it is the one reader of the partitions it reads, so
    what it delivered in earlier micro-batches is what the gates wait on. Partitions it does not
    read (``assign`` of some) count as passed."""

    def __init__(self) -> None:
        self.delivered: Positions = {}
        self.unread: set[int] = set()

    def committed(self) -> Positions:
        return {**self.delivered, **{p: UNLIMITED for p in self.unread}}

    def published(self) -> Positions:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


class _Unreachable(Exception):
    """A topic's log that cannot be reached now (``Planner.topics`` waits for it)."""

    def __init__(self, topic: str, error: BaseException) -> None:
        super().__init__(topic)
        self.topic, self.error = topic, error


# -- planning (driver side) -----------------------------------------------------------------------
class TopicNow(NamedTuple):
    """A topic as a plan reads it: its history, its log's snapshot, and the log's table id (the
    incarnation: a topic deleted and created again has a new one)."""

    image: TopicImage
    snap: LogSnapshot
    topic_id: str
    epoch: int | None = None  # a replicated topic's leader epoch when read (its log ends: the high watermark)
    history: tuple = ()  # ... and its replica states, oldest first (the divergence check reads them)
    leader_ends: dict | None = None  # ... and its leader's log ends, not capped at the high watermark
    unread: tuple = ()  # ... and the in-sync roots this process never read (the high watermark: unknown)
    open_ends: dict | None = None  # read_committed: the log ends past the last stable offsets (``snap``'s)


class Planner:
    """What a read covers, and where each batch of a stream ends. Reads the root with delta-rs."""

    def __init__(self, root: str, opts: SourceOptions, spark=None, storage: rs_reader.Storage = None,
                 spark_reads: bool = True) -> None:
        """``spark``: the driver's session, for a group's positions; ``storage``: delta-rs storage
        options for a remote root (the read's ``storage.*`` options over what the session's S3A
        settings say); ``spark_reads``: whether Spark's Parquet reader reaches the log's files
        (``pipelines.spark.reading``)."""
        self.root, self.opts, self.spark, self.spark_reads = root, opts, spark, spark_reads
        self.storage = dict(storage) if storage else (opts.storage or None)
        self.reader = FastTopicReader(root, self.storage)
        self._gates: dict[str, tuple[OffsetGate, _OwnPositions]] = {}
        self._published: StreamOffset | None = None  # the positions last committed to the group
        self._locations: dict[str, str] = {}
        self._planned: dict[tuple[str, tuple], int] = {}  # (topic, its end positions) -> log version planned at
        self._last_trigger: float | None = None  # when a micro-batch was last let go (minOffsetsPerTrigger)
        self._latest: dict[str, Positions] = {}  # each topic's log ends as the last plan read them
        self.losses = Losses(root, opts, self._session, self.reader, self.storage)

    def topics(self) -> dict[str, TopicNow]:
        """Each topic the read covers now (``_topics_now``). A topic whose log cannot be reached (its
        leader root lost) is waited for, as consumers wait (``pipelines.waits``): read again until its
        root is back or an election moved it, for at most ``leaderWaitTimeout``; then the error
        names the root and the election to run."""
        waits: dict[str, LostRootWait] = {}
        while True:
            try:
                return self._topics_now()
            except _Unreachable as lost:
                if lost.topic not in waits:
                    waits[lost.topic] = LostRootWait(lost.topic, self.opts.leader_wait_timeout_ms, LEADER_WAIT_TIMEOUT,
                                                     lambda t=lost.topic: self._replica_state(t))
                waits[lost.topic].failed(lost.error)

    def _replica_state(self, topic: str):
        """``topic``'s latest replica state (None: not replicated)."""
        found = [s for (t, _i), s in self.reader.replica_states().items() if t == topic]
        return max(found, key=lambda s: (s.incarnation, s.replica_version)) if found else None

    def _topics_now(self) -> dict[str, TopicNow]:
        """Each topic the read covers now. The log's snapshot is read before the history the gates
        use: the controller records a resize in the history before it commits the log's metadata,
        so the history read after a snapshot holds every resize the snapshot's records follow. A
        replicated topic is read at its leader, below its high watermark (``replication.reads``)."""
        for attempt in range(5):
            images = self.reader.images()
            states = self.reader.replica_states()
            live = [t for t, img in images.items() if img.latest and img.latest.event.value not in ("deleting", "deleted")]
            out: dict[str, TopicNow] = {}
            for topic in resolve_topics(self.opts, live):
                location = self._locations[topic] = self._log_location(self.reader.latest(topic, images, states))
                try:
                    snap, topic_id = rs_reader.log_snapshot(location, storage=self.storage,
                                                            marks=self.opts.read_committed)
                except Exception as exc:  # its root lost (delta_errors.lost_root): waited out by ``topics``
                    if not (isinstance(exc, LOST_ROOT) or lost_root(exc)):
                        raise
                    replicated = any(t == topic for t, _i in states)
                    raise _Unreachable(topic, leader_unavailable(topic, location, exc) if replicated else exc) from exc
                out[topic] = TopicNow(images[topic], snap, topic_id)
            if states:
                out = self._below_high_watermark(out, images, states)
                if out is None:  # an election moved a topic while it was read: read again
                    continue
            if any(now.snap.topic_version > now.image.version for now in out.values()):
                images = self.reader.images()
                out = {t: now._replace(image=images[t]) for t, now in out.items()}
            if self.opts.read_committed:  # its ends, latest and a stream's caps: the last stable offsets
                out = {t: now._replace(snap=stable_view(now.snap), open_ends=dict(now.snap.log_ends))
                       for t, now in out.items()}
            return out
        raise LakelogError("the replicated topics this read covers kept changing leaders while it was planned; "
                           "the next trigger plans again")

    def _below_high_watermark(self, topics: dict[str, TopicNow], images: dict[str, TopicImage],
                              first: dict) -> dict[str, TopicNow] | None:
        """``topics`` with each replicated one's log ends capped at its high watermark: the replica
        state read again after its leader's snapshot (None if a leader epoch moved since ``first``,
        the states the snapshots' locations were taken from: the same root elected again leads
        another history)."""
        from control_plane.replication.reads import high_watermark_by_delta_rs, kept_of, unread
        from control_plane.replication.rules import below_high_watermark, same_leadership
        from control_plane.replication.state import log_path, states_of

        states = self.reader.replica_states()
        rows = None
        out = dict(topics)
        for topic, now in topics.items():
            state = states.get((topic, images[topic].records[0].topic_version))
            if state is None:
                continue
            seen = first.get((topic, images[topic].records[0].topic_version))
            if seen is None or not same_leadership(seen, state) or log_path(state, state.leader) != self._locations[topic]:
                return None
            hw = high_watermark_by_delta_rs(state, now.snap.log_ends, self.storage, kept_of(now.snap))
            ends = below_high_watermark(now.snap.log_ends, hw, now.snap.earliest_offsets())
            snap = now.snap.model_copy(update={"log_ends": ends})
            if rows is None:
                rows = states_of(rs_reader.rows(self.reader.layout.control("topic_replicas"), storage=self.storage))
            history = tuple(sorted((s for s in rows if s.topic == topic and s.incarnation == state.incarnation),
                                   key=lambda s: s.replica_version))
            out[topic] = now._replace(snap=snap, epoch=state.leader_epoch, history=history,
                                      leader_ends=dict(now.snap.log_ends), unread=tuple(unread(state)))
        return out

    def location(self, topic: str) -> str:
        """Where ``topic``'s log is (as the last ``topics()`` read it: a topic deleted and created
        again gets a new log, which the next plan reads)."""
        if topic not in self._locations:
            self._locations[topic] = self._log_location(self.reader.latest(topic))
        return self._locations[topic]

    def _log_location(self, record: TopicRecord) -> str:
        """The log's location as the control plane records it (absolute). Under a remote root a
        local location means the control tables were copied from elsewhere: refused, since it
        would read another root's log (or no log, on an executor)."""
        if is_remote(self.root) and not is_remote(record.location):
            raise InvalidConfigurationError(
                f"topic '{record.topic}' under {self.root} records its log at the local path {record.location}: "
                "the control tables were made under another root (locations are absolute); read the root "
                "where they were made")
        return record.location

    def covered(self, topic: str, snap: LogSnapshot) -> list[int]:
        """The readable partitions of ``topic`` the read covers."""
        readable = snap.readable()
        if self.opts.assign is None:
            return readable
        return [p for p in readable if p in self.opts.assign.get(topic, ())]

    def bounds(self, topics: dict[str, TopicNow]) -> dict[str, dict[int, tuple[int, int]]]:
        """(earliest, latest) of every partition the read covers (``assign``: each must exist)."""
        every = {t: {p: (now.snap.first_offset(p), now.snap.log_ends[p]) for p in now.snap.readable()}
                 for t, now in topics.items()}
        return bounds_to_read(self.opts, every)

    def starting(self, topics: dict[str, TopicNow]) -> dict[str, Positions]:
        """Where the read starts on every covered partition (``startingOffsets`` or a time)."""
        return self._positions(self.opts.starting, starting_positions, topics)

    def ending(self, topics: dict[str, TopicNow]) -> dict[str, Positions]:
        """Where a batch read ends on every covered partition (``endingOffsets`` or a time)."""
        return self._positions(self.opts.ending, ending_positions, topics)

    def _positions(self, spec: OffsetSpec | TimestampSpec, by_offsets, topics: dict[str, TopicNow]) -> dict[str, Positions]:
        """``spec``'s positions: offsets mapped by ``by_offsets``, times looked up (``_at_times``)."""
        bounds = self.bounds(topics)
        if isinstance(spec, OffsetSpec):
            return by_offsets(spec, bounds)
        return self._at_times(spec, topics, bounds)

    def _at_times(self, spec: TimestampSpec, topics: dict[str, TopicNow],
                  bounds: dict[str, dict[int, tuple[int, int]]]) -> dict[str, Positions]:
        """Each covered partition's first offset whose record's time is at or after ``spec``'s, as
        Spark's Kafka source asks Kafka's ListOffsets. None there: an end is the latest offset; a
        start fails, or with ``startingOffsetsByTimestampStrategy=latest`` is the latest offset."""
        targets = timestamp_targets(spec, {t: list(ps) for t, ps in bounds.items()})
        out: dict[str, Positions] = {}
        for topic, per_partition in targets.items():
            snap = topics[topic].snap
            location = self.location(topic)
            out[topic] = {}
            for p, ts in per_partition.items():
                lo, hi = bounds[topic][p]
                found = (rs_reader.first_offset_at(location, snap.version, p, lo, ts, storage=self.storage)
                         if hi > lo else None)
                if found is None and not spec.ending and self.opts.timestamp_strategy == "error":
                    raise InvalidConfigurationError(
                        f"{spec.option}: topic '{topic}' partition {p} has no record at or after {ts} ms (its records "
                        f"end at offset {hi}); give an earlier time, or startingOffsets, or set "
                        "startingOffsetsByTimestampStrategy to latest to start such a partition at its latest offset")
                out[topic][p] = hi if found is None else found
        return out

    def initial(self) -> StreamOffset:
        """A new stream's first offset: where the read starts, each topic's incarnation and view."""
        topics = self.topics()
        self._check_latest_known(topics)
        start = self.starting(topics)
        bounds = self.bounds(topics)
        for topic, per_partition in start.items():
            # read_committed: a start in an open transaction waits there, as a consumer's position does
            beyond = {p: s for p, s in per_partition.items()
                      if s > bounds[topic][p][1] and not _in_open_transaction(topics[topic], p, s)}
            if beyond:  # records written later below the start would never be read
                named = ", ".join(f"partition {p} at {s}, past its log end {bounds[topic][p][1]}"
                                  for p, s in sorted(beyond.items()))
                self.losses.report(topic, f"startingOffsets starts {named}: the records written there later, below the "
                                        "start, would be skipped", [],
                                 "give offsets at or below the log end (-1 for latest), or set failOnDataLoss to "
                                 "false to start at the log end with a warning")
                start[topic] = {**per_partition, **{p: bounds[topic][p][1] for p in beyond}}
        return StreamOffset({t: TopicOffset(now.topic_id, now.snap.topic_version, start.get(t, {}), now.epoch)
                             for t, now in topics.items()})

    def _check_latest_known(self, topics: dict[str, TopicNow]) -> None:
        """A new stream starting anywhere but earliest needs each replicated topic's high watermark:
        one counting an in-sync root this process never read (it cannot be read now) stands at the
        log start, and "latest" taken there would read every record once the root is back. Refused
        until the root is read or leaves the in-sync set (Kafka's leader answers OFFSET_NOT_AVAILABLE)."""
        from control_plane.replication.reads import latest_unknown

        spec = self.opts.starting
        if isinstance(spec, OffsetSpec) and spec.kind == "earliest":
            return
        for topic, now in topics.items():
            if now.leader_ends and any(latest_unknown(now.unread, now.snap.log_ends[p], e)
                                       for p, e in now.leader_ends.items()):
                raise LeaderNotAvailableError(
                    f"topic '{topic}': the in-sync root {now.unread[0]} cannot be read and this process never read it, "
                    "so its high watermark, where startingOffsets=latest (or a time or an offset) would start, is not "
                    "known; start again once the root is readable or has left the in-sync set "
                    "(replication.max_lag_seconds), or start from earliest")

    def next_end(self, start: StreamOffset, limit: int, caps: dict[str, Positions] | None = None) -> StreamOffset:
        """Where the next micro-batch from ``start`` ends: at most ``limit`` records over every
        topic, shared by lag (as Spark's Kafka source shares ``maxOffsetsPerTrigger``), none the
        resize gates hold back, none past ``caps`` (Trigger.AvailableNow's ends). New partitions
        start at their first offset; retired ones are dropped. Equal to ``start`` when no position
        moves, whatever else was committed to the logs, and while ``minOffsetsPerTrigger`` holds
        the batch back (``_held_back``; not under AvailableNow, whose run must end)."""
        topics = self.topics()
        for topic in sorted(set(start.topics) - set(topics)):
            self.losses.report(topic, "the topic was deleted (or no longer matches subscribePattern) while this "
                                    f"query read it; it stood at {start.positions(topic)}", [])
        accounted: dict[str, TopicOffset] = {}
        gated: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, now in topics.items():
            offset = self.losses.account(topic, now, start.topics.get(topic))
            snap = now.snap
            covered = self.covered(topic, snap)
            positions = {p: max(offset.positions.get(p, snap.first_offset(p)), snap.first_offset(p)) for p in covered}
            gate, own = self._gate(topic, now.image)
            own.delivered = dict(positions)
            own.unread = set(snap.readable()) - set(covered)
            cap = None if caps is None else caps.get(topic, {})  # a topic that appeared since the start: nothing
            for p, (s, e) in plan_ranges(gate, _capped(snap, cap), positions, UNLIMITED).items():
                gated[(topic, p)] = (s, e)
            accounted[topic] = offset.moved(positions)
            self._latest[topic] = {p: snap.log_ends[p] for p in covered}
        if caps is None and self._held_back(sum(e - s for s, e in gated.values())):
            return start
        shares = share_by_lag({k: e - s for k, (s, e) in gated.items()}, limit)
        out: dict[str, TopicOffset] = {}
        for topic, offset in accounted.items():
            ends = dict(offset.positions)
            ends.update({p: gated[(t, p)][0] + n for (t, p), n in shares.items() if t == topic})
            out[topic] = offset.moved(ends, topics[topic].epoch if ends != dict(offset.positions) else None)
        end = StreamOffset(out)
        self.pin(end, topics)  # only the latest end's: Spark runs a batch before it asks for the next
        return end

    def _held_back(self, available: int) -> bool:
        """``minOffsetsPerTrigger``: whether to wait for more than the ``available`` records, as
        Spark's Kafka source's ``delayBatch`` decides: not once ``maxTriggerDelay`` has passed since
        the last batch was let go (the first call lets one go), on this process's monotonic clock."""
        if self.opts.min_offsets_per_trigger is None:
            return False
        now = time.monotonic()
        waited_ms = None if self._last_trigger is None else (now - self._last_trigger) * 1000
        if waited_ms is not None and waited_ms < self.opts.max_trigger_delay_ms \
                and available < self.opts.min_offsets_per_trigger:
            return True
        self._last_trigger = now
        return False

    def publish(self, offset: StreamOffset) -> None:
        """With a ``group`` option: commit the stream's positions to the group's tables, so
        ``groups describe`` shows its lag and the controller counts the group before retiring a
        partition it has not read. Nothing when the positions did not move."""
        if not self.opts.group or (self._published is not None and self._published.topics == offset.topics):
            return
        from control_plane.group.offsets import GroupOffsets
        from control_plane.records import TopicPartition

        positions = {TopicPartition(topic=t, partition=int(p)): int(o)
                     for t, to in offset.topics.items() for p, o in to.positions.items()}
        GroupOffsets(self._session(), self.root).commit_positions(
            self.opts.group, positions, member_id=member_id(self.opts.group))
        self._published = offset

    def _session(self):
        """The driver's Spark session (group commits and reads)."""
        if self.spark is None:
            raise InvalidConfigurationError(
                "the group option needs the driver's Spark session (a PySpark driver, not Spark Connect) to commit "
                "positions")
        return self.spark

    def _gate(self, topic: str, image: TopicImage) -> tuple[OffsetGate, _OwnPositions]:
        """One gate per topic for the stream's life (thresholds, once fixed, are cached); its
        history is refreshed on every plan."""
        reads = _TopicReads(image, self.location(topic), self.storage)
        if topic not in self._gates:
            own = _OwnPositions()
            self._gates[topic] = (OffsetGate(reads, reads, topic, f"stream on {topic}", own), own)
        gate, own = self._gates[topic]
        gate.admin = gate.log = reads
        return gate, own

    def pin(self, end: StreamOffset, topics: dict[str, TopicNow]) -> None:
        """Read ``end``'s batch at the log versions of ``topics`` (a batch read's plan)."""
        self._planned = {(t, tuple(sorted(o.positions.items()))): topics[t].snap.version for t, o in end.topics.items()}

    def reads(self, start: StreamOffset, end: StreamOffset) -> list[TopicRead]:
        """What lies between ``start`` and ``end``, per topic, at the log version ``end`` was
        planned on (the latest, for a batch replayed after a restart). A range whose start the
        log no longer holds is lost (``Losses.report``)."""
        out = []
        for topic, to in end.topics.items():
            location = self.location(topic)
            version = self._planned.get((topic, tuple(sorted(to.positions.items()))))
            snap = rs_reader.log_snapshot(location, version, self.storage, self.opts.read_committed)[0]
            had = start.topics.get(topic)
            # Positions of another incarnation (the topic deleted and created again) say nothing here.
            begun = dict(had.positions) if had is not None and had.topic_id in (None, to.topic_id) else {}
            spans, lost = [], []
            for p, stop in to.positions.items():
                first = snap.first_offset(p) if p in snap.metadata.partitions else stop
                s = begun.get(p, first)
                if s > stop:  # moved back to where an unclean election cut the log (failOnDataLoss off)
                    s = self.losses.cut(topic, had, p, stop)
                if s < min(first, stop):
                    lost.append(ExpiredRange(topic=topic, partition=p, first=s, end=min(first, stop)))
                s = max(s, first)
                if stop > s:
                    spans.append((p, s, stop))
            if lost and version is None:  # a batch replayed after a restart: its plan's accounting is gone
                reported = self.losses.reported(topic)
                lost = [r for r in lost if (r.partition, r.end) not in reported]
                if lost:
                    self.losses.report(topic, "records of this batch were removed from the log before it read them", lost)
            read = TopicRead(topic, location, snap.version, tuple(spans), snap.timestamp_types, self.storage,
                             tuple((p, snap.dense_from(p)) for p, _s, _e in spans))
            out.append(with_aborted(read, snap) if self.opts.read_committed else read)
        return out

    def batch_range(self) -> tuple[StreamOffset, StreamOffset]:
        """A batch read's start and end (``startingOffsets`` and ``endingOffsets`` or their times),
        pinned to the log versions read now. A start outside a partition's log is data loss under
        ``failOnDataLoss``; else the nearest offset in it."""
        topics = self.topics()
        starts, ends, bounds = self.starting(topics), self.ending(topics), self.bounds(topics)
        for topic, per_partition in starts.items():
            for p, s in per_partition.items():
                lo, hi = bounds[topic][p]
                if _in_open_transaction(topics[topic], p, s):
                    check_start_in_open_transaction(topic, p, s, ends[topic][p], hi, topics[topic].open_ends[p])
                    continue
                if not lo <= s <= hi and self.opts.fail_on_data_loss:
                    raise DataLossError(
                        f"topic '{topic}' partition {p}: starting offset {s} is outside the log ({lo}-{hi}); "
                        "give an offset in range, or set failOnDataLoss to false to start at the nearest")
        start = StreamOffset({t: TopicOffset(topics[t].topic_id, None, {p: max(s, bounds[t][p][0]) for p, s in ps.items()})
                              for t, ps in starts.items()})
        end = StreamOffset({t: TopicOffset(topics[t].topic_id, None,
                                           {p: e if e == starts[t][p] and _in_open_transaction(topics[t], p, e)
                                            else min(max(e, 0), bounds[t][p][1]) for p, e in ps.items()})
                            for t, ps in ends.items()})
        self.pin(end, topics)
        return start, end

    def latest(self) -> dict[str, Positions]:
        """Each covered partition's log end as the last plan (``next_end``) read it, per topic."""
        return {t: dict(ends) for t, ends in self._latest.items()}

    def metrics(self, consumed: StreamOffset) -> dict[str, str]:
        """The source metrics of Spark's Kafka source at ``consumed``: how far each partition's
        position is behind its log end as the last plan read it (``behind_latest``)."""
        return behind_latest({t: dict(self._latest.get(t, {})) for t in consumed.topics},
                             {t: dict(o.positions) for t, o in consumed.topics.items()})


def _in_open_transaction(now: TopicNow, partition: int, start: int) -> bool:
    """``in_open_transaction`` for ``partition`` of ``now`` (never under read_uncommitted)."""
    return now.open_ends is not None and in_open_transaction(start, now.snap.log_ends[partition],
                                                             now.open_ends[partition])


def _capped(snap: LogSnapshot, caps: Positions | None) -> LogSnapshot:
    """``snap`` with its log ends lowered to ``caps`` (partitions absent from ``caps``: nothing)."""
    if caps is None:
        return snap
    return snap.model_copy(update={"log_ends": {p: min(e, caps.get(p, 0)) for p, e in snap.log_ends.items()}})
