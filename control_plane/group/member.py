"""One member of a consumer group: where the member's decisions are carried out.

Each poll reads the group once (``GroupImage``), asks the member's state machine what to do
(``lifecycle.step``: adopt a newer generation that includes it, claim released partitions,
rejoin and lead, heartbeat) and carries the actions out here, in order: the fenced commits
(``offsets``, ``store``), the generation's plan (``reconcile.plan_generation``) and the listener's
callbacks. A commit that is fenced ends the poll with the member's partitions lost (Kafka's
onPartitionsLost); no write returns as if it landed when it did not. A thread keeps heartbeating
while a long batch runs (``heartbeat``).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace

from pyspark.sql import SparkSession

from control_plane.assignors import assignor
from control_plane.group import lifecycle
from control_plane.group.expiry_reports import expired_of, expired_since
from control_plane.group.heartbeat import Heartbeats
from control_plane.group.image import GroupImage
from control_plane.group.lifecycle import Acquire, Adopt, Beat, Join, Lead, Lose, MemberView, Move, Phase, Revoke
from control_plane.group.listener import RebalanceListener
from control_plane.group.reconcile import plan_generation
from control_plane.group.state import MembershipChange, PositionsFn
from control_plane.group.store import GroupTables
from control_plane.liveness import Liveness
from control_plane.records import (
    CommitKind,
    ExpiredRange,
    GenerationRecord,
    MemberHeartbeat,
    MemberState,
    PartitionPosition,
    TopicPartition,
)
from control_plane.settings import GroupSettings
from log_store.names import check_group_name
from log_store.crash import crash_point
from log_store.errors import IllegalGenerationError, InvalidConfigurationError

FENCED_WRITE_ATTEMPTS = 3  # a write fenced by this many generations in a row gives the partitions up


class GroupMember:
    """One member of a consumer group: call ``poll`` between batches and ``commit`` after them.

    ``positions`` is called when the member must commit before giving partitions up; it
    returns the next offset to deliver for each partition the member owns.
    """

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        group: str,
        topics: list[str],
        settings: GroupSettings | None = None,
        member_id: str | None = None,
        listener: RebalanceListener | None = None,
        group_positions: Callable[[str], dict[int, int]] | None = None,
    ) -> None:
        check_group_name(group)
        if not topics:
            raise InvalidConfigurationError("a group member must subscribe to at least one topic; pass --topic")
        self.settings = settings or GroupSettings()
        assignor(self.settings.assignor)
        self.tables = GroupTables(spark, root)
        for topic in topics:
            self.tables.topics.get(topic)  # unknown topics fail before the member joins
        self.group = group
        self.topics = sorted(set(topics))
        self.member_id = member_id or f"member-{uuid.uuid4().hex[:12]}"
        self.listener = listener or RebalanceListener()
        self.view = MemberView(member_id=self.member_id, protocol=self.settings.protocol)
        self.unassigned_ms = 0
        self._unassigned_since: float | None = time.monotonic()
        self._last_lists = float("-inf")
        self._last_row: dict | None = None
        self.published: dict[TopicPartition, int] = {}
        self.liveness = Liveness()
        # The group's positions on a topic when this member leads (the consumer adds its sink's).
        self.group_positions = group_positions or (lambda topic: self.tables.offsets.committed(self.group, topic))
        self.reported: list[ExpiredRange] = []  # expiry reports this member wrote
        self._told_revoked: set[TopicPartition] = set()  # the listener heard of their revocation, not yet landed
        self.last_generation: GenerationRecord | None = None
        self.heartbeats = Heartbeats(self.tables, group, self.member_id, self.settings.heartbeat_interval_ms)
        self.heartbeats.start(lambda: self.view.generation > 0 or self.view.phase is Phase.JOINING)

    # -- the member as others read it ------------------------------------------------------
    @property
    def protocol(self) -> str:
        return self.settings.protocol

    @property
    def phase(self) -> Phase:
        return self.view.phase

    @property
    def generation(self) -> int:
        return self.view.generation

    @property
    def joining(self) -> int | None:
        """The generation this member is joining (None: it is not joining)."""
        return self.view.target if self.view.phase is Phase.JOINING else None

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return self.view.owned

    @property
    def pending(self) -> set[TopicPartition]:
        """Partitions assigned to it that their previous owner has not released yet."""
        return self.view.pending_partitions

    @property
    def followup(self) -> bool:
        return self.view.phase is Phase.FOLLOW_UP

    @property
    def warm(self) -> frozenset[TopicPartition]:
        return self.view.warm

    @property
    def rebalances(self) -> int:
        return self.view.rebalances

    # -- public ----------------------------------------------------------------------------
    def poll(self, positions: PositionsFn = dict) -> MembershipChange:
        """One round of the group protocol: read the group, step, carry the actions out."""
        change = MembershipChange(generation=self.generation)
        image = self.read_image()
        self.last_generation = image.generation
        step = lifecycle.step(self.view, image, self.settings)
        self._carry_out(step.moves, positions, change)
        change.rebalancing = step.reason is not None
        change.generation = self.generation
        self._track_unassigned()
        return change

    def read_image(self) -> GroupImage:
        """The group as this poll sees it: the latest generation, the live members (judged on this
        process's monotonic clock), the partition lists once a heartbeat interval, and the
        revocations of the partitions this member waits on."""
        began = time.monotonic()  # judge as of when the read began: a slow read must not kill others
        gen = self.tables.generation(self.group)
        states = self.tables.member_states(self.group)
        ticks = self.tables.ticks(self.group)
        for member, state in states.items():
            self.liveness.observe(member, (state.beat, ticks.get(member, (None, None))[0]))
        # A live member left out of the generation and not rejoining is a zombie (expelled,
        # still heartbeating): not counted.
        live = {m: b for m, b in states.items()
                if m != self.member_id and self._alive(b, as_of=began)
                and (gen is None or m in gen.member_ids() or (b.joining or 0) > gen.generation)}
        lists = None
        if began - self._last_lists >= self.settings.heartbeat_interval_ms / 1000:
            self._last_lists = began
            lists = self.tables.partition_lists(self.topics)
        waited = set(self.pending)
        if gen and gen.generation > self.generation:
            waited |= {TopicPartition(topic=h.topic, partition=h.partition) for h in gen.handovers
                       if h.to_member == self.member_id}
        return GroupImage(group=self.group, generation=gen, live=live, partition_lists=lists,
                          revocations=self.tables.revocations(self.group, waited), now=began,
                          heartbeat_due=self.heartbeats.due())

    def commit(self, positions: dict[TopicPartition, int]) -> MembershipChange:
        """Commit positions of owned partitions under this member's generation (fenced).

        If the group moved on to a generation this member joined (a cooperative member keeps
        delivering while it rebalances), adopt it and commit what it still owns; if the member
        was left out, its partitions are lost and IllegalGenerationError is raised.
        """
        def write() -> None:
            owned = {tp: o for tp, o in positions.items() if tp in self.owned}
            self.tables.offsets.commit_positions(self.group, owned, self.generation, self.member_id)

        return self._under_generation(write, positions, "commit fenced")

    def report_expired(self, positions: dict[TopicPartition, int]) -> MembershipChange:
        """Report (fenced, as ``commit``) what this member had not delivered of retired
        incarnations of partitions it owns (``positions``: its positions, some below their
        number's current incarnation): called before its consumer moves such a position up to
        the new incarnation's start (campaign seed 18)."""
        def write() -> None:
            expired = self._expired_of({tp: o for tp, o in positions.items() if tp in self.owned})
            if expired:
                self.tables.offsets.commit_positions(self.group, {}, self.generation, self.member_id, expired=expired)
                self.reported.extend(expired)

        return self._under_generation(write, positions, "expiry report fenced")

    def _under_generation(self, write: Callable[[], None], positions: dict[TopicPartition, int], why: str) -> MembershipChange:
        """``write()`` under this member's generation: it lands, or IllegalGenerationError is raised
        with the member's partitions lost. A fenced write adopts a newer generation this member
        joined and tries again, up to ``FENCED_WRITE_ATTEMPTS`` times; never returns without the write."""
        change = MembershipChange(generation=self.generation)
        for attempt in range(1, FENCED_WRITE_ATTEMPTS + 1):
            try:
                write()
                return change
            except IllegalGenerationError:
                gen = self.tables.generation(self.group)
                if not lifecycle.adoptable(self.view, gen) or attempt == FENCED_WRITE_ATTEMPTS:
                    self._lose(why, change)
                    raise
                self._carry_out(lifecycle.adopt(self.view, gen)[1], lambda: positions, change)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self, positions: PositionsFn = dict) -> None:
        """Leave the group: revoke and commit everything, then say so (Kafka's LeaveGroup)."""
        change = MembershipChange(generation=self.generation)
        if self.owned:
            gone = sorted(self.owned, key=str)
            self._carry_out([(Revoke(gone, self.generation), replace(self.view, owned=frozenset()))], positions, change)
        self.view = self.view.to(Phase.LEFT, target=None)
        self.heartbeats.stop()
        self._beat_now()

    def publish(self, positions: dict[TopicPartition, int]) -> None:
        """Publish positions other members wait on (rule 10), in this member's heartbeat."""
        self.published.update(positions)
        self._beat_now()

    def published_positions(self, topic: str) -> dict[int, int]:
        """The highest position each live member published, per partition of ``topic``."""
        live = {m: b for m, b in self.tables.member_states(self.group).items()
                if m != self.member_id and self._alive(b)}
        return GroupImage(group=self.group, generation=None, live=live).published(topic)

    def _alive(self, beat: MemberHeartbeat, as_of: float | None = None) -> bool:
        return beat.state != MemberState.LEFT.value and self.liveness.alive(beat.member_id, beat.session_timeout_ms, as_of)

    def ready_for_warm(self, partitions: Iterable[TopicPartition]) -> None:
        """A warm-up copy caught up: ask for a rebalance that hands the partitions over."""
        ready = {tp for tp in partitions if tp in self.view.warm}
        self.view = replace(self.view, warm_ready=self.view.warm_ready | ready)

    # -- carrying the actions out ----------------------------------------------------------
    def _carry_out(self, moves: list[Move], positions: PositionsFn, change: MembershipChange) -> None:
        """Each action in order; the member's view moves on as each lands. A fenced commit
        ends it: the member's partitions are lost."""
        for action, after in moves:
            failed = self._do(action, after, positions, change)
            if failed:
                self._lose(failed, change)
                return

    def _do(self, action, after: MemberView, positions: PositionsFn, change: MembershipChange) -> str | None:
        """Carry out one action; the reason it was fenced, or None once it landed (and the view is ``after``)."""
        if isinstance(action, Adopt):
            return self._adopt(action, after, positions, change)
        if isinstance(action, Revoke):
            rows, expired = self._revocation(action.partitions, positions)
            try:
                self.tables.offsets.commit_positions(self.group, rows, action.generation, self.member_id,
                                                     CommitKind.REVOKE, expired)
            except IllegalGenerationError:
                self._told_revoked -= set(action.partitions)
                return "revocation fenced"
            self._told_revoked -= set(action.partitions)
            crash_point("group:after_revoke")
            self.reported.extend(expired)
            change.given_up(action.partitions)
        elif isinstance(action, Acquire):
            rows = {tp: -1 for tp in action.partitions}  # a claim, not a position: the offset stays unknown
            try:
                self.tables.offsets.commit_positions(self.group, rows, action.generation, self.member_id,
                                                     CommitKind.ACQUIRE)
            except IllegalGenerationError:
                return "claim fenced"
            crash_point("group:after_acquire")
            change.assigned.extend(action.partitions)
            self._told_revoked -= set(action.partitions)
            self.listener.on_partitions_assigned(action.partitions)
        elif isinstance(action, Lose):
            self._told_revoked -= set(action.partitions)
            change.given_up(action.partitions, lost=True)
            self.listener.on_partitions_lost(action.partitions)
        self.view = after
        if isinstance(action, (Join, Beat)):
            self._beat_now()
        elif isinstance(action, Lead):
            self._lead(action, positions, change)
        return None

    def _adopt(self, a: Adopt, after: MemberView, positions: PositionsFn, change: MembershipChange) -> str | None:
        """The generation's assignment in one fenced commit: the fence raised if no member did yet
        (the leader's own adoption, or the leader died first), what left revoked, what came claimed."""
        gen = a.generation
        if a.new_warm:
            change.warmups = a.new_warm
            self.listener.on_warmup_assigned(a.new_warm)
        revoked, revoked_expired = self._revocation(a.gone, positions)
        try:
            raised = self.tables.offsets.adopt(self.group, gen.generation, gen.leader, gen.expired, self.member_id,
                                               revoked, revoked_expired, a.claim + a.kept)
        except IllegalGenerationError:
            self._told_revoked -= set(a.gone)
            return "adoption fenced"
        self._told_revoked -= set(a.gone)
        self.view = after
        if raised:
            self.reported.extend(gen.expired)
        if a.gone:
            crash_point("group:after_revoke")
            self.reported.extend(revoked_expired)
            change.given_up(a.gone)
        if a.claim or a.kept:
            crash_point("group:after_acquire")
            change.assigned.extend(a.claim)
            self._told_revoked -= set(a.claim)
            if a.claim:  # keys_assigned fires where delivery starts: the consumer's gate decides (rule 8)
                self.listener.on_partitions_assigned(a.claim)
        self._beat_now()
        return None

    def _lead(self, lead: Lead, positions: PositionsFn, change: MembershipChange) -> None:
        """Plan the generation with the joined members and propose it; if written, adopt it at
        once (the leader raises the fence in the commit that takes its share)."""
        joined = sorted([*lead.others, self._beat_now()], key=lambda b: b.member_id)
        snaps = self.tables.snapshots(self.topics)
        undeleted, marked = self.tables.partition_lists(self.topics, snaps)
        versions = {t: snap.topic_version for t, snap in snaps.items()}
        gen = self.tables.generation(self.group)
        record = plan_generation(
            self.group, lead.target, joined, undeleted, marked, self.settings.assignor, self.member_id,
            lead.reason, lead.waited_ms, gen,
        )
        expired = expired_since(self.tables, self.group, gen, versions, joined, self.group_positions)
        record = record.model_copy(update={"topic_versions": versions, "expired": expired})
        if not self.tables.propose(record):
            return
        crash_point("group:after_propose")
        self.last_generation = record
        self._carry_out(lifecycle.adopt(self.view, record)[1], positions, change)

    def _lose(self, why: str, change: MembershipChange) -> None:
        self.view, moves = lifecycle.lose(self.view, why)
        for action, _after in moves:
            self._do(action, self.view, dict, change)

    def _revocation(self, partitions: list[TopicPartition],
                    positions: PositionsFn) -> tuple[dict[TopicPartition, int], list[ExpiredRange]]:
        """Before giving ``partitions`` up: the listener's callbacks (the consumer commits there),
        then the positions and expiry reports the revoking commit carries. A revocation tried
        again (its reads met a lost root) tells the listener once, as Kafka's consumer does."""
        if not partitions:
            return {}, []
        news = [tp for tp in partitions if tp not in self._told_revoked]
        if news:
            self.listener.on_partition_keys_maybe_revoked(news)
            self.listener.on_partitions_revoked(news)
            self._told_revoked |= set(news)
        rows = self._positions_of(partitions, positions)
        return rows, self._expired_of(rows)

    def _positions_of(self, partitions: list[TopicPartition], positions: PositionsFn) -> dict[TopicPartition, int]:
        """Each partition's position: the consumer's, else the group's committed one, else -1."""
        where = positions()
        committed: dict[TopicPartition, int] = {}
        for topic in {tp.topic for tp in partitions if tp not in where}:
            found = self.tables.offsets.committed(self.group, topic)
            committed.update({TopicPartition(topic=topic, partition=p): o for p, o in found.items()})
        return {tp: where.get(tp, committed.get(tp, -1)) for tp in partitions}

    def _expired_of(self, rows: dict[TopicPartition, int]) -> list[ExpiredRange]:
        """What this member must report expired of its partitions (``expiry_reports.expired_of``)."""
        return expired_of(self.tables, self.group, rows)

    def _beat_now(self) -> MemberHeartbeat:
        """Heartbeat: a full row when this member's state changed, else a cheap tick."""
        state = {Phase.JOINING: MemberState.JOINING, Phase.LEFT: MemberState.LEFT}.get(self.phase, MemberState.STABLE)
        beat = MemberHeartbeat(
            group=self.group, member_id=self.member_id, state=state, generation=self.generation,
            joining=self.joining, protocol=self.protocol, assignor=self.settings.assignor, topics=self.topics,
            owned=sorted(self.owned, key=str), previous=sorted(self.view.previous, key=str),
            warm_ready=sorted(self.view.warm_ready, key=str), warmup=self.settings.warmup,
            session_timeout_ms=self.settings.session_timeout_ms, rebalance_timeout_ms=self.settings.rebalance_timeout_ms,
            unassigned_ms=self.unassigned_ms, rebalances=self.rebalances, host=socket.gethostname(),
            positions=[PartitionPosition(topic=tp.topic, partition=tp.partition, offset=o)
                       for tp, o in sorted(self.published.items(), key=lambda kv: str(kv[0])) if tp in self.owned],
        )
        content = beat.model_dump(exclude={"heartbeat_at", "unassigned_ms", "beat"})
        if content != self._last_row:  # a state row is a heartbeat too: it carries the next count
            self.tables.heartbeat(beat.model_copy(update={"beat": self.heartbeats.next_count()}))
            self._last_row = content
            self.heartbeats.sent()
        else:
            self.heartbeats.tick()
        return beat

    def _track_unassigned(self) -> None:
        now = time.monotonic()
        if self.owned:
            if self._unassigned_since is not None:
                self.unassigned_ms += int((now - self._unassigned_since) * 1000)
                self._unassigned_since = None
        elif self._unassigned_since is None:
            self._unassigned_since = now
