"""A single-member consumer: from the group's committed positions to a handler or a Delta sink.

At-least-once: each batch goes to a user function, then the positions are committed.
Exactly-once: each batch is written to a Delta sink table in one commit together with the new
positions, stored as the sink's application transaction versions (one per source partition), so
a crash between the sink write and the control-plane commit never delivers a record twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from control_plane.group.offsets import GroupOffsets, unreported_expiry
from control_plane.records import ExpiredRange, ReplicaEvent
from control_plane.replication import rules
from control_plane.replication.operations import Replication
from control_plane.replication.reads import check_position, latest_unknown
from control_plane.topics import TopicAdmin
from pipelines.settings import ConsumerSettings
from log_store.headers import headers_as
from log_store.crash import crash_point
from log_store.delta_errors import is_missing_file
from log_store import commits
from log_store.errors import (
    LOST_ROOT, AppVersionConflictError, LeaderNotAvailableError, NullValueRefusedError, SinkConflictError,
    leader_unavailable, null_values_refused,
)
from log_store.names import check_group_name, sink_app_id, sink_commit_metadata
from log_store.log_metadata import LogSnapshot, Mode, check_set_transactions_kept
from log_store.table_create import create_table, table_exists
from log_store.log_append import value_as_kept
from log_store.topic_log import RECORD_SCHEMA, TopicLog
from pipelines.gating import CommittedPositions, GroupPositions, OffsetGate, plan_ranges
from pipelines.sink_positions import SinkPositions, incarnation_of
from pipelines.waits import LostRootWait
from log_store.txn_reads import READ_COMMITTED, stable_view
from pipelines.batch_reads import BatchReads

Handler = Callable[[DataFrame, dict[int, tuple[int, int]]], None]


class ArrowHandler:
    """A handler that takes each batch as an Arrow table (ordered by partition and offset) rather
    than a DataFrame: on a local root the batch is read with delta-rs, no Spark job and no JVM
    (how ``lakelog consume`` prints records); elsewhere it is Spark's read, brought to the driver."""

    def __init__(self, fn: Callable[[pa.Table, dict[int, tuple[int, int]]], None]) -> None:
        self.fn = fn

    def __call__(self, batch: pa.Table, ranges: dict[int, tuple[int, int]]) -> None:
        self.fn(batch, ranges)
ProgressFn = Callable[[int, int], None]
Ranges = dict[int, tuple[int, int]]
# A sink row is a log record plus its topic, so a sink can be audited against the log.
SINK_SCHEMA = StructType([StructField("topic", StringType(), False), *RECORD_SCHEMA.fields])


class ConsumeResult(BaseModel):
    topic: str
    group: str
    records: int
    batches: int
    positions: dict[int, int]
    seconds: float
    expired: int = 0  # records of retired partitions this group had not read (reported, see groups describe)


@dataclass(frozen=True)
class ResumePoint:
    """Where a consumer resumes, from one read of the control plane and its sink."""

    committed: dict[int, int]  # the group's positions, raised to what the sink holds
    reported: set[tuple[int, int]]  # the group's expiry reports: (partition, end)
    incarnations: dict[int, int]  # GroupOffsets.incarnations: what its sink ids are keyed by
    sink_ahead: dict[int, int] = field(default_factory=dict)  # positions only the sink holds
    sink_legacy: dict[str, int] = field(default_factory=dict)  # earlier releases' ids the next sink commit writes again
    epochs: dict[int, int] = field(default_factory=dict)  # the partition epoch committed with each position (not the sink's)


class Consumer:
    """Consumes one topic for one group (one member; group membership is another module)."""

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        topic: str,
        group: str,
        settings: ConsumerSettings | None = None,
        member_id: str | None = None,
        group_positions: GroupPositions | None = None,
    ) -> None:
        """``group_positions``: what the resize gates learn of the group (a group member's, with
        the positions its peers published); by default the group's committed positions."""
        check_group_name(group)
        self.spark = spark
        self.topic = topic
        self.group = group
        self.settings = settings or ConsumerSettings()
        self.member_id = member_id or f"consumer-{uuid.uuid4()}"
        self.admin = TopicAdmin(spark, root)
        self.log = TopicLog(spark, self.admin.get(topic).location)  # opened by each batch's snapshot
        # A replicated topic's log moves to the new leader's root on an election: followed batch by batch.
        self._replication = Replication(spark, root) if self.admin.replica_state(topic) is not None else None
        self.offsets = GroupOffsets(spark, root)
        self.gate = OffsetGate(self.admin, self.log, topic, group,
                               group_positions or CommittedPositions(self.offsets, group, topic))
        self._incarnations: dict[int, int] | None = None  # GroupOffsets.incarnations, read with positions
        self._reported: set[tuple[int, int]] = set()  # expiry reports, read with positions
        # A standalone consumer reports what retirements took below its group's committed positions
        # once per topic version it delivers at (``report_retired``); a member's group protocol does.
        self._standalone, self._retired_checked = group_positions is None, -1
        self._retired_reports: list[ExpiredRange] = []  # ``report_retired``'s, for ``run``'s result
        self.sink_ahead: dict[int, int] = {}  # positions the sink holds past the committed offsets, read with them
        self._sink_legacy: dict[str, int] = {}  # dotted-id positions the next sink commit writes again (SinkPositions)
        # The latest snapshot's leader log ends (a replicated topic's, not capped at the high
        # watermark), and the in-sync roots this process never read (``reads.unread``).
        self._leader_ends: dict[int, int] = {}
        self._unread: list[str] = []
        self._checked: dict[int, tuple] = {}  # partition -> (replica version, position, epoch) that passed the check
        # the wait for a lost leader root (pipelines.waits); its clock runs until the log is read again
        self.wait = LostRootWait(topic, self.settings.leader_wait_timeout_ms, "consumer.leader_wait_timeout_ms",
                                 lambda: self.admin.replica_state(topic))
        self.reads = BatchReads(spark, self.settings.isolation_level == READ_COMMITTED)  # its batches as delivered

    # -- positions ---------------------------------------------------------------------------
    def positions(self, sink_path: str | None = None, snap: LogSnapshot | None = None,
                  point: "ResumePoint | None" = None, planned_at: int | None = None,
                  owned: Iterable[int] = (), waiting: set[int] | None = None) -> dict[int, int]:
        """Where delivery resumes per readable partition: committed, sink, or the reset policy;
        and for the ``owned`` partitions that are no longer readable (a member assigned one that
        was retired after its assignment was planned), the committed position, where there is
        one: the member reports what it had not delivered from there, not from 0 (campaign seed
        557, where the position moved back from 34 to 0 and delivered records were reported
        expired).

        A committed position below the start of its partition's current incarnation (the number
        was retired and grown back) stays there: the caller reports what the group had not
        delivered of the retired incarnation, then moves up (``LogSnapshot.below_incarnations``).
        Raising it here skipped those records unreported (campaign seed 471).
        ``point``: ``resume(sink_path)`` if the caller has just read it.

        ``planned_at``: the topic version a group's assignment was planned on. A partition the
        group has no position in then starts, under ``earliest``, where that plan saw it begin:
        if its number was retired and grown back since, the position stays below the current
        incarnation, and the member reports the retired records expired before moving up rather
        than skipping them unreported (campaign seed 41).

        The positions of the ``owned`` partitions (of all, if none are named) are taken with the
        leader epoch they were read under (``took``).

        A partition without a position under ``latest`` while its high watermark is not known
        (``reads.latest_unknown``) has no start: with ``waiting`` it is added there and left out
        (a group member reads its other partitions and asks again, as Kafka's consumer retries
        that partition's ListOffsets alone); without, LeaderNotAvailableError.
        """
        snap = snap or self.snapshot()
        if point is None:
            if sink_path:
                self._incarnations = None  # read again: an operator may have reset positions since
            point = self.resume(sink_path)
        committed = point.committed
        earliest = self.settings.auto_offset_reset == "earliest"
        planned = (self.admin.image(self.topic).starts_at(planned_at)
                   if earliest and planned_at is not None and planned_at < snap.topic_version else {})
        out = {}
        for p in snap.readable():
            start = snap.first_offset(p)  # a group without a position starts at the log start
            if p in committed:
                out[p] = committed[p]
            elif earliest:
                out[p] = min(start, planned.get(p, start))
            else:
                if latest_unknown(self._unread, snap.log_ends[p], self._leader_ends.get(p, 0)):
                    if waiting is not None:
                        waiting.add(p)
                        continue
                    raise LeaderNotAvailableError(
                        f"topic '{self.topic}' partition {p}: the in-sync root {self._unread[0]} cannot be read and this "
                        "process never read it, so the high watermark where auto_offset_reset=latest starts is not "
                        "known (it would start at the log start); run again once the root is readable or has left the "
                        "in-sync set (replication.max_lag_seconds)")
                out[p] = snap.log_ends[p]
        owned = list(owned)
        for p in owned:
            if p not in out and p in committed:
                out[p] = committed[p]
        self.took({p: out[p] for p in owned if p in out} if owned else out, point, snap)
        return out

    def took(self, positions: dict[int, int], point: "ResumePoint", snap: LogSnapshot) -> None:
        """A replicated topic's ``positions``, just taken, with the leader epoch each was read under
        (kept in ``offsets.epochs``: committed with the position, and what ``check_positions`` checks
        it under): the one committed with it (Kafka keeps the leader epoch with a committed offset,
        and a consumer validates a position it is assigned with it); none for a position only the
        sink holds; ``snap``'s for a start by the reset policy, an offset of the history ``snap``
        read. Without it, a process that took a position and never read its partition committed it
        without an epoch, and a later unclean cut below it was checked against the log end only;
        and a partition that came back kept the epoch this process last read it under."""
        if self._replication is None:
            return
        self.forget(positions)
        epochs = {}
        for p, pos in positions.items():
            if point.committed.get(p) == pos:
                epoch = point.epochs.get(p)
            else:
                part = snap.metadata.partitions.get(p)
                epoch = part.leader_epoch if part is not None else None
            if epoch is not None:
                epochs[p] = epoch
        self.offsets.read_under(self.topic, epochs)

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions given up (or about to be taken anew): their epochs and checks are forgotten."""
        for p in list(partitions):
            self.offsets.epochs.pop((self.topic, p), None)
            self._checked.pop(p, None)

    def resume_point(self, sink_path: str | None = None) -> "ResumePoint":
        """Where this group resumes on the topic: its committed positions raised to what the sink
        already holds (a crash between the sink commit and the offsets commit leaves the sink
        ahead), from one read of the control plane and the sink. A query: it changes nothing."""
        state = self.offsets.state(self.group, self.topic)  # one read: positions, reports, incarnations
        incarnations = self._incarnations if self._incarnations is not None else state.incarnations
        committed, ahead, legacy = dict(state.committed), {}, {}
        if sink_path and table_exists(self.spark, sink_path):
            held = SinkPositions.read(self.spark, sink_path, self.group, self.topic)
            legacy = held.carry_over(self.group, self.topic)
            for p, v in held.current(incarnations).items():
                if v > committed.get(p, -1):
                    committed[p] = ahead[p] = v
        epochs = {p: e for p, e in state.epochs.items() if p not in ahead}
        return ResumePoint(committed, state.expired, incarnations, ahead, legacy, epochs)

    def resume(self, sink_path: str | None = None) -> "ResumePoint":
        """``resume_point``, remembered: the expiry reports, the positions only the sink holds, the
        incarnations its sink ids are keyed by, the earlier release's ids to carry over."""
        point = self.resume_point(sink_path)
        self._reported, self.sink_ahead, self._sink_legacy = point.reported, point.sink_ahead, point.sink_legacy
        if sink_path and self._incarnations is None:
            self._incarnations = point.incarnations
        return point

    def report_expired(self, snap: LogSnapshot, positions: dict[int, int],
                       reported: set[tuple[int, int]] | None = None) -> list[ExpiredRange]:
        """Report, once, the records of retired partitions this group had not delivered (a
        standalone consumer; group members report through the group protocol). ``reported``:
        what the group already reported, if the caller has just read it."""
        ranges = unreported_expiry(
            self.topic, snap, positions, positions,
            lambda: self.admin.image(self.topic).retired_between(-1, snap.topic_version),
            lambda: reported if reported is not None else self.offsets.expired(self.group, self.topic))
        self.offsets.report_expired(self.group, ranges, member_id=self.member_id)
        return ranges

    def report_retired(self, snap: LogSnapshot, positions: dict[int, int]) -> list[ExpiredRange]:
        """A standalone consumer's report of what retired partitions (not grown back) took below
        where it stands, as ``run`` makes at its start; once per topic version. Where it stands:
        the caller's ``positions`` (a loop's, ahead of the last commit) or else the committed one."""
        if not self._standalone or self._retired_checked == snap.topic_version:
            return []
        ranges = []
        if any(pm.mode is Mode.NONE for pm in snap.metadata.partitions.values()):
            committed = self.offsets.committed(self.group, self.topic)
            ranges = self.report_expired(snap, {**committed, **{p: max(o, committed.get(p, o)) for p, o in positions.items()}})
        self._retired_checked = snap.topic_version
        self._retired_reports += ranges
        return ranges

    def pass_retired(self, snap: LogSnapshot, positions: dict[int, int]) -> tuple[list[ExpiredRange], dict[int, int]]:
        """Positions left below their partition's current incarnation (its number retired and grown
        back since they were taken): what they pass reported expired, and where they move; nothing
        when none is. Never a silent skip, whoever loops (``run``, or a read-process-write job of
        its own calling ``positions`` and ``deliver``)."""
        below = snap.below_incarnations(positions)
        if not below:
            return [], {}
        self.check_positions(below, snap)
        return self.report_expired(snap, below), self.moved_up(snap, below)

    def moved_up(self, snap: LogSnapshot, partitions: Iterable[int]) -> dict[int, int]:
        """Where positions below their partition's first readable offset move (``snap``'s
        ``incarnation_starts``), stamped, on a replicated topic, with the leader epoch of ``snap``,
        as a delivered batch's ends are: that offset is one of the history ``snap`` read. Left with
        the epoch of the position it replaces, the divergence check took the start of every epoch
        since for a cut below it (campaign seed 1532: a position moved past records delete-records
        removed after a clean election, "delivered up to 48, an election cut the log at 16"). The
        epoch is ``snap``'s own, not that of a later snapshot the caller took meanwhile (a member's
        expiry report that adopts a new generation reads one for the assignment's positions).

        The caller first checks the positions it leaves (``check_positions``, under their own
        epochs: an election that cut below one is said, not hidden by the move), then reports
        what they skip expired."""
        starts = snap.incarnation_starts(partitions)
        if self._replication is not None and starts:
            self.offsets.read_under(self.topic, {p: snap.metadata.partitions[p].leader_epoch for p in starts})
        return starts

    def plan(self, positions: dict[int, int], limit: int, snap: LogSnapshot | None = None) -> Ranges:
        """Ranges [position, end) to read next, at most ``limit`` records, shared over partitions.

        ``end`` is the log end in ``snap``, or lower where the resize gates (rules 8, 9) hold a
        partition back. Retired partitions are never read.
        """
        return plan_ranges(self.gate, snap or self.snapshot(), positions, limit)

    # -- at-least-once -----------------------------------------------------------------------
    def run(self, handler: Handler, max_records: int | None = None, on_progress: ProgressFn | None = None) -> ConsumeResult:
        """Hand each batch to ``handler``, then commit; stops when caught up or at ``max_records``."""
        return self._loop(None, handler, max_records, on_progress)

    # -- exactly-once into a Delta sink ------------------------------------------------------
    def run_to_sink(self, sink_path: str, max_records: int | None = None, on_progress: ProgressFn | None = None) -> ConsumeResult:
        """Write every record to the Delta table at ``sink_path`` exactly once."""
        self.ensure_sink(sink_path)
        return self._loop(sink_path, None, max_records, on_progress)

    def ensure_sink(self, sink_path: str) -> None:
        """Create the sink table if missing (members of a group may race to create it). The
        change feed's ``_commit_version`` is the delivery order the ordering audit checks."""
        create_table(self.spark, sink_path, SINK_SCHEMA, {"delta.enableChangeDataFeed": "true"}, what="the sink")

    def snapshot(self) -> LogSnapshot:
        """The log snapshot a batch is planned and read on. A replicated topic's log is first
        looked up again (an election moves it to the new leader's root), and each partition's log
        end is capped at the high watermark (``Replication.below_high_watermark``)."""
        if self._replication is None:
            return self._isolated(self.log.snapshot())

        def leader_snapshot(location: str) -> LogSnapshot:
            try:
                if location != self.log.path:
                    self.log = self.gate.log = TopicLog.for_path(self.spark, location)
                snap = self.log.snapshot()
                self._leader_ends = dict(snap.log_ends)
                return snap
            except Exception as exc:
                raise leader_unavailable(self.topic, location, exc) from exc

        snap, state = self._replication.below_high_watermark(self.topic, leader_snapshot)
        self._unread = self._replication.unread(state)
        return self._isolated(snap)

    def _isolated(self, snap: LogSnapshot) -> LogSnapshot:
        """``snap`` as this consumer's isolation level sees it: under read_committed each log end
        is the partition's last stable offset (``LogSnapshot.stable_end``), where batches, the
        ``latest`` reset and being caught up stop, as Kafka's read_committed consumer stops."""
        return stable_view(snap) if self.reads.committed else snap

    def _first_snapshot(self) -> LogSnapshot:
        """``snapshot``, waiting (``self.wait``) for a lost leader root or an election that moved it
        while it was read."""
        return self.wait.run(self.snapshot)

    def check_positions(self, positions: dict[int, int], snap: LogSnapshot) -> None:
        """Kafka's divergence check (KIP-320) of a replicated topic's positions: a position past
        where an election since its epoch cut the history (an unclean one, or a root back from an
        older copy) raises ``LogTruncatedError``; never a silent skip. The epoch a position was
        read under is the partition epoch kept with it (``offsets.epochs``: of the batch this
        process delivered, or committed with a position it took, ``took``), as the elections name
        it (``rules.replica_epoch_at``); a position of unknown epoch is checked against the leader's
        log end (not the high watermark, which may step back below a position while nothing is
        lost). Each position is checked once per replica state: a poll that moved nothing costs one
        look at the replica history."""
        if self._replication is None:
            return
        history = self.admin.replica_history(self.topic)
        if not any(s.event == ReplicaEvent.ELECT for s in history):
            return
        version = history[-1].replica_version
        kept = {p: self.offsets.epochs.get((self.topic, p)) for p in positions}
        todo = {p: pos for p, pos in positions.items() if self._checked.get(p) != (version, pos, kept[p])}
        records = None
        for p, pos in sorted(todo.items()):
            epoch = None
            if kept[p] is not None:
                records = records if records is not None else self.admin.image(self.topic).records
                epoch = rules.replica_epoch_at(rules.elect_epochs(records, p), kept[p])
            end = self._leader_ends.get(p, snap.log_ends.get(p, pos))
            cut = end if epoch is None else rules.cut_below(history, epoch, p)
            check_position(self.topic, p, pos, cut, f"group '{self.group}'")
            self._checked[p] = (version, pos, kept[p])

    @property
    def replicated(self) -> bool:
        return self._replication is not None

    def leader_readable(self) -> bool:
        """The log this consumer reads is still the topic's leader and can be opened."""
        try:
            return (self.admin.get(self.topic).location == self.log.path
                    and self.log.transaction().read_version >= 0)
        except Exception:
            return False

    def deliver(self, positions: dict[int, int], limit: int, sink_path: str | None = None, handler: Handler | None = None,
                snap: LogSnapshot | None = None, report: bool = True) -> Ranges:
        """Deliver the next batch after ``positions`` to the sink or handler; return its ranges.

        The batch is planned on one log snapshot and read at that snapshot's version. ``report``:
        positions below a grown-back incarnation are reported expired and moved (``pass_retired``);
        False for a warm copy of partitions another member owns, which reports its own.
        """
        snap = snap or self.snapshot()
        snap.metadata.check_not_deleted()
        self.check_positions(positions, snap)
        if report:  # a caller's own loop too (seed 6072); not a warm copy of partitions others own
            positions = {**positions, **self.pass_retired(snap, positions)[1]}
            self.report_retired(snap, positions)
        try:
            ranges = self.plan(positions, limit, snap)
            if not ranges:
                return ranges
            if isinstance(handler, ArrowHandler) and not sink_path:
                handler(self.reads.batch(self.log, ranges, snap, RECORD_SCHEMA.fieldNames()), ranges)
            else:
                data = self.log.read(ranges, ordered=sink_path is None, version=snap.version,
                                     exclude=self.reads.aborted(self.log, ranges, snap, "`"))
                if sink_path:
                    self._write_sink(sink_path, data, ranges, snap.version)
                else:
                    handler(data, ranges)
        except Exception as exc:
            # a replicated topic's leader root lost while the batch was planned or read: read it
            # again, also when the root is back by now (a file of the snapshot was missing: seed 1235)
            if self._replication is not None and (is_missing_file(exc) or not self.leader_readable()):
                self.admin.get(self.topic)  # deleted meanwhile: say so
                raise LeaderNotAvailableError(f"the leader log of '{self.topic}' went away while a batch was read "
                                              f"({str(exc).splitlines()[0][:200]}); the batch is read again") from exc
            self.log.metadata().check_not_deleted()  # deleted meanwhile: its files are gone; say so
            raise
        if self._replication is not None:  # what these positions were read under, committed with them
            self.offsets.read_under(self.topic, {p: snap.metadata.partitions[p].leader_epoch for p in ranges})
        return ranges

    def records_in(self, ranges: Ranges, snap: LogSnapshot) -> int:
        """How many records ``ranges`` of ``snap`` hold, as this consumer delivers them (``BatchReads.count``)."""
        return self.reads.count(self.log, ranges, snap)

    def _write_sink(self, sink_path: str, data: DataFrame, ranges: Ranges, log_version: int) -> None:
        """``log_version``: the version of ``self.log`` the batch was read at (named in the commit's metadata)."""
        txn = commits.start(self.spark, sink_path, "the sink")
        check_set_transactions_kept(txn.configuration(), sink_path)
        ids = {p: self._sink_app_id(p) for p in ranges}
        carried = self._sink_legacy  # read inside the transaction: a racing writer of one fails this commit
        for a in set(carried) - set(ids.values()):
            txn.app_version(a)
        for p, (start, _end) in ranges.items():
            if max(txn.app_version(ids[p]), carried.get(ids[p], -1)) > start:
                raise SinkConflictError(f"another member already wrote partition {p} past {start} to the sink")
        columns = {"headers": headers_as("headers", data.schema["headers"].dataType, txn.column_type("headers")),
                   "value": value_as_kept(txn)}  # a sink of an earlier release refuses a tombstone, saying so
        rows = data.select(F.lit(self.topic).alias("topic"), *[columns.get(c, c) for c in RECORD_SCHEMA.fieldNames()])
        try:
            txn.write(rows)
        except NullValueRefusedError as exc:
            raise null_values_refused(self.topic, sink_path, sink=True) from exc
        try:
            txn.commit({**carried, **{ids[p]: end for p, (_s, end) in ranges.items()}},
                       sink_commit_metadata(self.group, self.topic, self.member_id, ranges, self.log.path,
                                            log_version))
        except AppVersionConflictError as exc:
            # Another member wrote one of these partitions while this batch was being written (this
            # member was paused past its session, campaign seed 440): nothing of the batch landed.
            raise SinkConflictError(
                f"another member wrote partitions {sorted(ranges)} to the sink while this batch was being written; "
                "nothing of the batch was committed: resume from the sink's positions") from exc
        self._sink_legacy = {}
        crash_point("consume:after_sink_commit")

    def _sink_app_id(self, partition: int) -> str:
        if self._incarnations is None:
            self._incarnations = self.offsets.incarnations(self.group, self.topic)
        return sink_app_id(self.group, self.topic, partition, incarnation_of(self._incarnations, partition))

    def _commit_offsets(self, positions: dict[int, int]) -> None:
        """Commit every position: it also records positions recovered from the sink."""
        self.offsets.commit(self.group, self.topic, positions, member_id=self.member_id)
        crash_point("consume:after_offset_commit")

    def _loop(self, sink_path: str | None, handler: Handler | None, max_records: int | None, on_progress: ProgressFn | None) -> ConsumeResult:
        started = time.perf_counter()
        snap = self._first_snapshot()
        if sink_path:
            self._incarnations = None  # read again: an operator may have reset positions since
        point = self.resume(sink_path)  # one read of the control plane serves all three
        positions = self.positions(sink_path, snap, point)
        expired = self.report_expired(snap, point.committed, self._reported)
        self._retired_checked = snap.topic_version  # reported just now (``report_retired``)
        delivered = batches = waits = 0
        interval = self.settings.offsets_commit_interval_ms / 1000
        # pending: positions moved since the last offsets commit (recovered from the sink count: seed 25)
        last_commit, pending = time.monotonic(), bool(self.sink_ahead)
        while max_records is None or delivered < max_records:
            limit = self.settings.max_records_per_batch
            if max_records is not None:
                limit = min(limit, max_records - delivered)
            try:
                snap = snap if batches == 0 and not waits else self.snapshot()
                reported, moved = self.pass_retired(snap, positions)
                if moved:  # a number retired and grown back meanwhile: reported, then moved on (seed 18)
                    expired += reported
                    positions.update(moved)
                    pending = True
                ranges = self.deliver(positions, limit, sink_path, handler, snap)
            except LOST_ROOT as exc:  # the leader root lost: wait for it or an election, up to the timeout
                waits += 1
                self.wait.failed(exc)
                continue
            self.wait.ok()
            expired, self._retired_reports = expired + self._retired_reports, []
            if not ranges:
                break
            positions.update({p: end for p, (_s, end) in ranges.items()})  # past any compaction gap, as Kafka's
            delivered += self.records_in(ranges, snap)
            batches += 1
            pending = True
            if not sink_path or time.monotonic() - last_commit >= interval:
                self._commit_offsets(positions)
                last_commit, pending = time.monotonic(), False
            if on_progress:
                on_progress(delivered, max_records or delivered)
        if pending:
            self._commit_offsets(positions)
        return ConsumeResult(
            topic=self.topic, group=self.group, records=delivered, batches=batches,
            positions=positions, seconds=time.perf_counter() - started, expired=sum(r.records for r in expired),
        )
