"""A consumer-group member that consumes one topic: the loop a consumer process or job runs.

Between batches it polls the group (heartbeat, rebalance, hand-overs); it delivers only the
partitions it owns, commits after every batch under its generation (fenced), commits before
giving a partition up, and leaves the group when done. Warm-up copies (the two-phase hand-over)
are read into ``warmup_handler`` without committing until they are within ``warmup_max_lag``
records of the owner's committed position; then ownership moves in one rebalance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pydantic import BaseModel
from pyspark.sql import SparkSession

from control_plane.group.listener import RebalanceListener
from control_plane.group.member import GroupMember

from control_plane.group.state import MembershipChange
from control_plane.records import TopicPartition
from control_plane.settings import GroupSettings
from pipelines.settings import ConsumerSettings
from log_store.crash import crash_point
from log_store.errors import LOST_ROOT, IllegalGenerationError, SinkConflictError, leader_unavailable
from pipelines.consumer import Consumer, Handler
from pipelines.member_positions import MemberPositions

_log = logging.getLogger("lakelog.group")

StopFn = Callable[[], bool]
BatchFn = Callable[[dict[int, tuple[int, int]], int], None]


class GroupConsumeResult(BaseModel):
    topic: str
    group: str
    member_id: str
    records: int
    batches: int
    expired: int = 0  # records of retired partitions this member reported it can no longer deliver
    generation: int
    rebalances: int
    unassigned_ms: int
    seconds: float


class GroupConsumer:
    """One member of ``group`` consuming ``topic`` (build one per process or job)."""

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        topic: str,
        group: str,
        settings: ConsumerSettings | None = None,
        group_settings: GroupSettings | None = None,
        member_id: str | None = None,
        listener: RebalanceListener | None = None,
        warmup_handler: Handler | None = None,
    ) -> None:
        self.consumer = Consumer(spark, root, topic, group, settings, member_id, group_positions=self)
        self.topic = topic
        self.listener = listener or RebalanceListener()
        self.sink_path: str | None = None
        self.member = GroupMember(spark, root, group, [topic], group_settings, self.consumer.member_id, self.listener,
                                  group_positions=lambda _topic: self.committed())
        # the member commits the positions its consumer delivers, with the leader epochs read under
        self.member.tables.offsets.epochs = self.consumer.offsets.epochs
        self.warmup_handler = warmup_handler
        self.held = MemberPositions()
        self._commit_due = False  # positions moved without a batch (recovered from the sink)

    @property
    def member_id(self) -> str:
        return self.member.member_id

    @property
    def positions(self) -> dict[int, int]:
        """The next offset to deliver of each partition the member owns."""
        return self.held.owned

    # -- what the resize gates learn of the group (pipelines.gating.GroupPositions) -------------
    def committed(self) -> dict[int, int]:
        """The group's positions raised to what the sink holds."""
        return self.consumer.resume_point(self.sink_path).committed

    def published(self) -> dict[int, int]:
        return self.member.published_positions(self.topic)

    def keys_opened(self, partitions: list[int]) -> None:
        self.listener.on_partition_keys_assigned([self._tp(p) for p in partitions])

    def _tp(self, p: int) -> TopicPartition:
        return TopicPartition(topic=self.topic, partition=p)

    def _tp_positions(self) -> dict[TopicPartition, int]:
        return {self._tp(p): o for p, o in self.positions.items()}

    def _apply_fenced(self, call: Callable[[], MembershipChange], sink_path: str | None) -> bool:
        """Apply what a member's call under its generation returns; False when the group fenced
        the member meanwhile (IllegalGenerationError): its positions are dropped and the next
        poll rejoins, so nothing is delivered under a generation that is over."""
        try:
            self._apply(call(), sink_path)
        except IllegalGenerationError:
            self.consumer.forget(self.held.owned)
            self.held.clear()
            return False
        return True

    def _apply(self, change: MembershipChange, sink_path: str | None) -> None:
        gone = [tp.partition for tp in change.revoked + change.lost]
        self.held.drop(gone)
        self.consumer.forget(gone)  # one that comes back comes with the epoch committed with it (``took``)
        if change.assigned:
            gen = self.member.last_generation  # the plan these partitions come from (seed 41)
            planned_at = gen.topic_versions.get(self.topic) if gen and gen.generation == self.member.generation else None
            waiting: set[int] = set()
            start = self.consumer.positions(sink_path, planned_at=planned_at,
                                            owned=[tp.partition for tp in change.assigned], waiting=waiting)
            starts = {tp.partition: start.get(tp.partition, 0) for tp in change.assigned if tp.partition not in waiting}
            # Positions only the sink held (its commit landed, the offsets commit did not): commit
            # them now, or the group's offsets lag its sink while nothing new arrives (seed 25).
            ahead = self.consumer.sink_ahead
            self._commit_due |= any(ahead.get(p) == o for p, o in starts.items())
            self._start(starts, waiting)
        earliest = self.consumer.log.earliest_offsets() if change.warmups else {}
        still_warm = {tp.partition for tp in self.member.warm if tp.topic == self.topic}
        self.held.warm_up((tp.partition for tp in change.warmups), earliest, still_warm)

    def _start_waiting(self, sink_path: str | None) -> None:
        """Ask again where the owned partitions without a start begin (their "latest" was not
        known): those now known start there, the others wait on. Kafka's consumer retries a
        partition's ListOffsets alone while it fetches the others."""
        if not self.held.waiting:
            return
        waiting: set[int] = set()
        try:
            start = self.consumer.positions(sink_path, owned=sorted(self.held.waiting), waiting=waiting)
        except LOST_ROOT as exc:  # the leader root lost: ask again after a pause, within the wait's timeout
            self.consumer.wait.failed(exc)
            return
        known = {p: start[p] for p in sorted(self.held.waiting) if p in start and p not in waiting}
        if known:
            self._start(known)

    def _start(self, starts: dict[int, int], waiting: set[int] = frozenset()) -> None:
        """Owned partitions now starting at ``starts`` (and ``waiting`` ones without a start yet):
        their keys assigned where the resize gates let delivery start (rule 8: shut ones fire when
        their gate opens), and the positions published (rule 10's "first time": others' gates may
        wait on these, and this member may deliver nothing until theirs open; two gated members
        waited on each other: seed 44)."""
        self.held.assign(starts, waiting)
        limits = self.consumer.gate.limits(starts)
        ungated = [self._tp(p) for p, o in starts.items() if limits.get(p, o + 1) > o]
        if ungated:
            self.listener.on_partition_keys_assigned(ungated)
        self._publish()

    def _drop_unowned(self) -> None:
        """Deliver only what the member owns now. Positions follow the membership changes, so
        this drops nothing unless they went out of step (seen once in the campaign, seed 8
        short: a batch delivered with no ownership row; RELIABILITY.md). Logged as a warning."""
        owned = {tp.partition for tp in self.member.owned if tp.topic == self.topic}
        stray = self.held.keep_only(owned)
        if stray:
            _log.warning("member %s held positions for partitions it does not own: %s (dropped)", self.member_id, stray)

    def _warm_up(self, limit: int) -> bool:
        """Read warm-up copies a batch further; report the ones caught up. True if it read any."""
        if not self.held.warm:
            return False
        ranges = self.consumer.deliver(self.held.warm, limit, None, self.warmup_handler or (lambda df, r: None),
                                       report=False)  # the owner reports what its partitions lost
        self.held.warm_advance(ranges)
        committed = self.member.tables.offsets.committed(self.member.group, self.topic)
        ready = self.held.warm_ready(committed, self.member.settings.warmup_max_lag)
        self.member.ready_for_warm([self._tp(p) for p in ready])
        return bool(ranges)

    def _publish(self) -> None:
        """Publish positions others wait on, under the source's conditions (rule 10): the first
        time; when the position grew and reached the log end; when the largest epoch before the
        position grew. Fires keys-maybe-revoked for them, as the source does."""
        try:
            snap = self.consumer.snapshot()
        except LOST_ROOT:
            return  # published on a later batch
        meta = snap.metadata
        epochs = {p: part.leader_epoch for p, part in meta.partitions.items()}
        due = self.held.due_publications(self.consumer.gate.watched(snap), snap.log_ends, epochs,
                                         self.consumer.gate.threshold)
        if due:
            tps = {self._tp(p): o for p, o in due.items()}
            self.listener.on_partition_keys_maybe_revoked(sorted(tps, key=str))
            self.member.publish(tps)

    def _riding_out_a_lost_leader(self, step):
        """``step()``, tried again while the topic's leader log cannot be read (its root lost, an
        election under way), as Kafka's consumer waits for a partition's new leader, for at most
        ``consumer.leader_wait_timeout_ms`` (the consumer's ``wait``, whose clock runs until the
        member reads the log again); then the wait's one-line error.

        A failure lakelog gives as its own "wait" (``pipelines.waits.LOST_ROOT``) is retried whatever
        the leader looks like now: the root may have come back, or the election finished, between
        the failure and the look (campaign seed 810). Any other failure of a replicated topic's
        member is retried while the leader cannot be read, and once more after it can (the failure
        may date from before); then raised."""
        tried_readable = False
        while True:
            try:
                return step()
            except Exception as exc:
                if not isinstance(exc, LOST_ROOT):
                    if not self.consumer.replicated:
                        raise
                    if self.consumer.leader_readable():
                        if tried_readable:
                            raise
                        tried_readable = True
                        continue
                    exc = leader_unavailable(self.topic, self.consumer.log.path, exc)
                self.consumer.wait.failed(exc)

    def _idle(self) -> bool:
        """Caught up with nothing to deliver because the log has nothing more, not because a gate
        holds it: the member is settled in a generation that covers the topic's current
        partitions, no controller change is half done, and every owned partition is at its log end.
        """
        m = self.member
        if m.generation <= 0 or m.pending or m.followup or m.joining is not None:
            return False
        try:
            snap = self.consumer.snapshot()
        except LOST_ROOT as exc:  # whether the log has more is not known: wait, up to the timeout
            self.consumer.wait.failed(exc)
            return False
        self.consumer.wait.ok()
        if self.consumer.admin.latest_version(self.topic) != snap.topic_version:
            return False  # the controller recorded a change it has not applied yet
        gen = m.last_generation
        undeleted, marked = m.tables.partition_lists([self.topic], {self.topic: snap})
        if gen is None or set(undeleted) != set(gen.partitions) or set(marked) != set(gen.marked):
            return False  # the topic's partitions changed: a rebalance is due
        return all(self.positions.get(p, 0) >= snap.log_ends.get(p, 0) for p in snap.readable()
                   if self._tp(p) in m.owned)

    def run(
        self,
        handler: Handler | None = None,
        sink_path: str | None = None,
        max_records: int | None = None,
        idle_timeout_s: float = 0.0,
        stop: StopFn | None = None,
        on_batch: BatchFn | None = None,
    ) -> GroupConsumeResult:
        """Consume until ``max_records``, ``stop()``, or caught up and settled for ``idle_timeout_s``.

        Exactly-once into the Delta table at ``sink_path``, or at-least-once through ``handler``.
        Leaves the group on the way out (committing first), also on errors.
        """
        started = time.perf_counter()
        self.sink_path = sink_path
        if sink_path:
            self.consumer.ensure_sink(sink_path)
        delivered = batches = 0
        idle_since: float | None = None
        pause = max(self.member.settings.heartbeat_interval_ms / 2000, 0.05)
        try:
            while True:
                change = self._riding_out_a_lost_leader(lambda: self.member.poll(self._tp_positions))
                self._riding_out_a_lost_leader(lambda: self._apply(change, sink_path))
                if self._commit_due:
                    self._commit_due = False
                    if not self._apply_fenced(lambda: self.member.commit(self._tp_positions()), sink_path):
                        continue
                limit = self.consumer.settings.max_records_per_batch
                if max_records is not None:
                    limit = min(limit, max_records - delivered)
                ranges = {}
                self._drop_unowned()
                self._start_waiting(sink_path)
                if self.positions and limit > 0:
                    try:
                        snap = self.consumer.snapshot()
                    except LOST_ROOT as exc:  # the leader root lost: wait for it or an election, up to the timeout
                        self.consumer.wait.failed(exc)
                        continue
                    below = snap.below_incarnations(self.positions)
                    if below:  # a number retired and grown back meanwhile: report, then move on (seed 18)
                        self.consumer.check_positions(below, snap)  # under their own epochs (moved_up)
                        expired = {self._tp(p): o for p, o in below.items()}
                        if not self._apply_fenced(lambda: self.member.report_expired(expired), sink_path):
                            continue
                        self.held.move(self.consumer.moved_up(snap, below))
                        # commit the move: a member taking the partition over next must not start
                        # from the old position, below a range already reported (campaign seed 530)
                        self._commit_due = True
                    try:
                        ranges = self.consumer.deliver(self.positions, limit, sink_path, handler, snap)
                    except SinkConflictError:  # a former owner wrote the sink first: resume after it,
                        self.held.move(self.consumer.positions(sink_path, owned=list(self.positions)))
                        # and commit there: nothing new may come, and the group's offsets would lag
                        # its sink until the member left (campaign seed 800)
                        self._commit_due = True
                        continue
                    except LOST_ROOT as exc:  # nothing was committed: the batch is read again
                        self.consumer.wait.failed(exc)
                        continue
                    self.consumer.wait.ok()
                if ranges:
                    self.held.advance(ranges)
                    if not self._apply_fenced(lambda: self.member.commit(self._tp_positions()), sink_path):
                        continue
                    crash_point("consume:after_offset_commit")
                    self._publish()
                    delivered += self.consumer.records_in(ranges, snap)
                    batches += 1
                    idle_since = None
                    if on_batch:
                        on_batch(ranges, delivered)
                else:
                    try:
                        warmed = self._warm_up(limit or 1)
                    except LOST_ROOT as exc:
                        self.consumer.wait.failed(exc)
                        continue
                    if not change.rebalancing and not warmed and self._idle():
                        idle_since = idle_since or time.perf_counter()
                        if time.perf_counter() - idle_since >= idle_timeout_s:
                            break
                    else:
                        idle_since = None
                    time.sleep(pause)
                if (max_records is not None and delivered >= max_records) or (stop and stop()):
                    break
        finally:  # leaving revokes, which reads the log: a lost root is waited out (campaign seed 1576)
            self._riding_out_a_lost_leader(lambda: self.member.close(self._tp_positions))
        return GroupConsumeResult(
            topic=self.topic, group=self.member.group, member_id=self.member_id, records=delivered, batches=batches,
            expired=sum(r.records for r in self.member.reported),
            generation=self.member.generation, rebalances=self.member.rebalances,
            unassigned_ms=self.member.unassigned_ms, seconds=time.perf_counter() - started,
        )
