"""One member of a consumer group: the member's side of the group protocol, run in ``poll``.

Each poll adopts a newer generation that includes it (revoke what left, claim what came),
rejoins when membership or the topic's partitions changed (an eager member first gives up
everything), leads when it has the smallest id among the joined members (the plan is
``reconcile.plan_generation``; the generation's compare-and-set and the fence are ``store`` and
``offsets``), and heartbeats (``heartbeat``: a thread keeps heartbeating while a long batch
runs). A member whose commit is fenced lost its partitions (Kafka's onPartitionsLost).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable

from pyspark.sql import SparkSession

from control_plane.assignors import assignor
from control_plane.group.heartbeat import Heartbeats
from control_plane.group.offsets import expired_ranges, unreported_expiry
from control_plane.group.reconcile import plan_generation
from control_plane.group.state import MembershipChange, PositionsFn, RebalanceProtocol
from control_plane.group.store import GroupTables
from control_plane.liveness import Liveness
from control_plane.records import (
    CommitKind,
    ExpiredRange,
    GenerationRecord,
    Handover,
    MemberHeartbeat,
    MemberState,
    PartitionPosition,
    TopicPartition,
)
from control_plane.settings import GroupSettings
from log_store.crash import crash_point
from log_store.errors import IllegalGenerationError, InvalidConfigurationError

FENCED_WRITE_ATTEMPTS = 3  # a write fenced by this many generations in a row gives the partitions up


class RebalanceListener:
    """Callbacks a member fires (Kafka's ConsumerRebalanceListener plus the source's per-key ones).

    Override what you need. ``on_partitions_revoked`` runs before the member commits and gives
    the partitions up; ``on_partitions_lost`` runs when the member learns it was expelled (its
    commits would be rejected). The per-key callbacks fire when a partition's keys start being
    delivered by this member and when they may move to another member.
    """

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...
    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None: ...
    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None: ...
    def on_partition_keys_assigned(self, partitions: list[TopicPartition]) -> None: ...
    def on_partition_keys_maybe_revoked(self, partitions: list[TopicPartition]) -> None: ...
    def on_warmup_assigned(self, partitions: list[TopicPartition]) -> None: ...


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
        if not group:
            raise InvalidConfigurationError("a consumer group id must not be empty; pass --group NAME")
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
        self.generation = 0
        self.joining: int | None = None
        self.joining_since = 0.0
        self.owned: set[TopicPartition] = set()
        self.previous: set[TopicPartition] = set()
        self.warm: set[TopicPartition] = set()
        self.warm_ready: set[TopicPartition] = set()
        self.pending: dict[TopicPartition, Handover] = {}
        self.followup = False
        self.rebalances = 0
        self.unassigned_ms = 0
        self._unassigned_since: float | None = time.monotonic()
        self._last_lists = float("-inf")
        self._last_row: dict | None = None
        self.published: dict[TopicPartition, int] = {}
        self.liveness = Liveness()
        # The group's positions on a topic when this member leads (the consumer adds its sink's).
        self.group_positions = group_positions or (lambda topic: self.tables.offsets.committed(self.group, topic))
        self.reported: list[ExpiredRange] = []  # expiry reports this member wrote
        self.last_generation: GenerationRecord | None = None
        self.heartbeats = Heartbeats(self.tables, group, self.member_id, self.settings.heartbeat_interval_ms)
        self.heartbeats.start(lambda: self.generation > 0 or self.joining is not None)

    # -- public ----------------------------------------------------------------------------
    @property
    def protocol(self) -> str:
        return self.settings.protocol

    def poll(self, positions: PositionsFn = dict) -> MembershipChange:
        """One round of the group protocol: adopt, rejoin, lead, heartbeat, finish hand-overs."""
        change = MembershipChange(generation=self.generation)
        gen = self.tables.generation(self.group)
        self.last_generation = gen
        if gen and gen.generation > self.generation:
            if self.member_id in gen.member_ids() and self.joining is not None and gen.generation >= self.joining:
                self._adopt(gen, positions, change)
            elif self.generation > 0 or self.owned:
                self._lose(change, f"generation {gen.generation} was formed without this member")
        self._finish_handovers(change)
        live = self._live_members(gen)
        reason = self._rejoin_reason(gen, live)
        if reason:
            target = max([(gen.generation if gen else 0) + 1] + [b.joining or 0 for b in live.values()])
            if self.joining != target:
                self._join(target, positions, change)
                live[self.member_id] = self._beat_now()
            change.rebalancing = True
            formed = self._lead(gen, live, reason)
            if formed is not None:  # the leader takes its share at once, in the commit that raises the fence
                self.last_generation = formed
                self._adopt(formed, positions, change)
        elif self.heartbeats.due():
            self._beat_now()
        change.generation = self.generation
        self._track_unassigned()
        return change

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
                adoptable = (gen and self.joining is not None and self.member_id in gen.member_ids()
                             and gen.generation >= self.joining)
                if not adoptable or attempt == FENCED_WRITE_ATTEMPTS:
                    self._lose(change, why)
                    raise
                self._adopt(gen, lambda: positions, change)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self, positions: PositionsFn = dict) -> None:
        """Leave the group: revoke and commit everything, then say so (Kafka's LeaveGroup)."""
        change = MembershipChange(generation=self.generation)
        self._revoke(sorted(self.owned, key=str), positions, change)
        self.joining = None
        self.heartbeats.stop()
        self._beat_now(MemberState.LEFT)

    def publish(self, positions: dict[TopicPartition, int]) -> None:
        """Publish positions other members wait on (rule 10), in this member's heartbeat."""
        self.published.update(positions)
        self._beat_now()

    def published_positions(self, topic: str) -> dict[int, int]:
        """The highest position each live member published, per partition of ``topic``."""
        out: dict[int, int] = {}
        for beat in self.tables.member_states(self.group).values():
            if beat.member_id == self.member_id or not self._alive(beat):
                continue
            for pos in beat.positions:
                if pos.topic == topic:
                    out[pos.partition] = max(out.get(pos.partition, -1), pos.offset)
        return out

    def _alive(self, beat: MemberHeartbeat, as_of: float | None = None) -> bool:
        return beat.state != MemberState.LEFT.value and self.liveness.alive(beat.member_id, beat.session_timeout_ms, as_of)

    def _live_members(self, gen: GenerationRecord | None) -> dict[str, MemberHeartbeat]:
        """Members judged alive by this member's own observation (control_plane.liveness), and
        either in the generation or joining a newer one. A live member left out of the
        generation and not rejoining is a zombie (expelled, still heartbeating): not counted."""
        began = time.monotonic()  # judge as of when the read began: a slow read must not kill others
        states = self.tables.member_states(self.group)
        ticks = self.tables.ticks(self.group)
        for member, state in states.items():
            self.liveness.observe(member, (state.beat, ticks.get(member, (None, None))[0]))
        return {
            m: b for m, b in states.items()
            if m == self.member_id or (self._alive(b, as_of=began) and (
                gen is None or m in gen.member_ids() or (b.joining or 0) > gen.generation))
        }

    def ready_for_warm(self, partitions: Iterable[TopicPartition]) -> None:
        """A warm-up copy caught up: ask for a rebalance that hands the partitions over."""
        self.warm_ready.update(tp for tp in partitions if tp in self.warm)

    # -- steps -----------------------------------------------------------------------------
    def _rejoin_reason(self, gen: GenerationRecord | None, live: dict[str, MemberHeartbeat]) -> str | None:
        if gen is None:
            return "first member"
        if self.member_id not in gen.member_ids():
            return f"member {self.member_id} joins"
        ids = set(live)
        if ids != gen.member_ids():
            added, gone = sorted(ids - gen.member_ids()), sorted(gen.member_ids() - ids)
            return f"members changed (+{added} -{gone})"
        if any((b.joining or 0) > gen.generation for b in live.values()):
            return "a member started a rebalance"
        if self.followup:
            return "follow-up: hand over revoked partitions"
        if self.warm_ready - {tp for a in gen.assignment if a.member_id == self.member_id for tp in a.partitions}:
            return "warm-up copies caught up"
        if time.monotonic() - self._last_lists >= self.settings.heartbeat_interval_ms / 1000:
            self._last_lists = time.monotonic()
            undeleted, marked = self.tables.partition_lists(self.topics)
            if set(undeleted) != set(gen.partitions) or set(marked) != set(gen.marked):
                return "topic partitions changed"
        return None

    def _join(self, target: int, positions: PositionsFn, change: MembershipChange) -> None:
        if self.protocol == RebalanceProtocol.EAGER:
            self._revoke(sorted(self.owned, key=str), positions, change)
            self.warm.clear()
        self.joining = target
        self.joining_since = time.monotonic()
        self.followup = False

    def _lead(self, gen: GenerationRecord | None, live: dict[str, MemberHeartbeat], reason: str) -> GenerationRecord | None:
        """If every live member joined the target (or the rebalance timed out) and this member
        has the smallest id among those joined, write the generation; return it if written
        (the leader then adopts it, raising the fence in the same commit as its claims)."""
        target = self.joining
        joined = [b for b in live.values() if b.joining == target and b.state == MemberState.JOINING.value]
        if not joined or min(b.member_id for b in joined) != self.member_id:
            return None
        waited_ms = (time.monotonic() - self.joining_since) * 1000
        if len(joined) < len(live) and waited_ms < self.settings.rebalance_timeout_ms:
            return None
        snaps = self.tables.snapshots(self.topics)
        undeleted, marked = self.tables.partition_lists(self.topics, snaps)
        versions = {t: snap.topic_version for t, snap in snaps.items()}
        record = plan_generation(
            self.group, target, sorted(joined, key=lambda b: b.member_id), undeleted, marked,
            self.settings.assignor, self.member_id, reason, int(waited_ms), gen,
        ).model_copy(update={"topic_versions": versions, "expired": self._expired_since(gen, versions, joined)})
        if not self.tables.propose(record):
            return None
        crash_point("group:after_propose")
        return record

    def _expired_since(self, gen: GenerationRecord | None, versions: dict[str, int],
                       joined: list[MemberHeartbeat]) -> list[ExpiredRange]:
        """The records of partitions retired within the group's view that it had neither
        delivered nor reported, for partitions no joined member owns (an owner reports its own
        on revoking).

        A group's view starts at its first generation (or at the first one that subscribed to a
        topic): partitions retired before it were never the group's to deliver. Not only since
        the previous generation: an owner that led the generation dropping its retired partition
        and died before revoking it left the report to no one (campaign seed 94); what was
        delivered or reported already is left out by ``expired_ranges``.
        """
        if gen is None:
            return []
        owned = {tp for b in joined for tp in b.owned}
        first = {}
        for g in self.tables.generations(self.group):
            for topic, version in g.topic_versions.items():
                first.setdefault(topic, version)
        out: list[ExpiredRange] = []
        for topic, upto in versions.items():
            after = first.get(topic, gen.topic_versions.get(topic))
            if after is None:
                continue
            retired = [r for r in self.tables.retired_between(topic, after, upto)
                       if TopicPartition(topic=topic, partition=r[0]) not in owned]
            if retired:
                out += expired_ranges(topic, retired, self.group_positions(topic),
                                      self.tables.offsets.expired(self.group, topic))
        return out

    def _adopt(self, gen: GenerationRecord, positions: PositionsFn, change: MembershipChange) -> None:
        """Take the new generation's assignment in one fenced commit: raise the fence if no member
        did yet (the leader's own adoption, or the leader died first), revoke what left, claim what came."""
        mine = set(gen.partitions_of(self.member_id))
        self.generation = gen.generation
        self.joining = None
        self.rebalances += 1
        gone = sorted(self.owned - mine, key=str)
        if gone:
            handed = {TopicPartition(topic=h.topic, partition=h.partition) for h in gen.handovers}
            # Withheld partitions reach their new owner in a follow-up rebalance; hand-overs don't need one.
            self.followup = gen.protocol == RebalanceProtocol.COOPERATIVE and bool(set(gone) - handed)
        new_warm = set(gen.warmups_of(self.member_id)) - self.warm
        self.warm = set(gen.warmups_of(self.member_id))
        self.warm_ready &= self.warm
        if new_warm:
            change.warmups = sorted(new_warm, key=str)
            self.listener.on_warmup_assigned(change.warmups)
        for h in gen.handovers:
            if h.to_member == self.member_id and h.from_member != self.member_id:
                self.pending[TopicPartition(topic=h.topic, partition=h.partition)] = h
        claim = sorted(mine - self.owned - set(self.pending), key=str)
        kept = sorted(mine & self.owned, key=str)
        revoked, revoked_expired = self._revocation(gone, positions)
        try:
            raised = self.tables.offsets.adopt(self.group, gen.generation, gen.leader, gen.expired, self.member_id,
                                               revoked, revoked_expired, claim + kept)
        except IllegalGenerationError:
            self._lose(change, "adoption fenced")
            return
        if raised:
            self.reported.extend(gen.expired)
        if gone:
            crash_point("group:after_revoke")
            self._revoked(gone, revoked_expired, change)
        if claim or kept:
            crash_point("group:after_acquire")
            self._acquired(claim, change)
        self._beat_now()
        self.previous = set(mine)

    def _acquire(self, claim: list[TopicPartition], kept: list[TopicPartition], change: MembershipChange) -> None:
        """Record ownership under the current generation (kept ones too: claims carry the generation)."""
        if not claim and not kept:
            return
        rows = {tp: -1 for tp in claim + kept}  # a claim, not a position: the offset stays unknown
        try:
            self.tables.offsets.commit_positions(self.group, rows, self.generation, self.member_id, CommitKind.ACQUIRE)
        except IllegalGenerationError:
            self._lose(change, "claim fenced")
            return
        crash_point("group:after_acquire")
        self._acquired(claim, change)

    def _acquired(self, claim: list[TopicPartition], change: MembershipChange) -> None:
        self.owned.update(claim)
        self.warm -= set(claim)
        self.warm_ready -= set(claim)
        change.assigned.extend(claim)
        if claim:  # keys_assigned fires where delivery starts: the consumer's gate decides (rule 8)
            self.listener.on_partitions_assigned(claim)

    def _finish_handovers(self, change: MembershipChange) -> None:
        done = [tp for tp, h in self.pending.items() if self.tables.handed_over(self.group, h, self.generation)]
        for tp in done:
            del self.pending[tp]
        if done:
            self._acquire(sorted(done, key=str), [], change)

    def _revoke(self, partitions: list[TopicPartition], positions: PositionsFn, change: MembershipChange) -> None:
        if not partitions:
            return
        rows, expired = self._revocation(partitions, positions)
        try:
            self.tables.offsets.commit_positions(self.group, rows, self.generation, self.member_id, CommitKind.REVOKE,
                                                 expired)
        except IllegalGenerationError:
            self._lose(change, "revocation fenced")
            return
        crash_point("group:after_revoke")
        self._revoked(partitions, expired, change)

    def _revocation(self, partitions: list[TopicPartition],
                    positions: PositionsFn) -> tuple[dict[TopicPartition, int], list[ExpiredRange]]:
        """Before giving ``partitions`` up: the listener's callbacks (the consumer commits there),
        then the positions and expiry reports the revoking commit carries."""
        if not partitions:
            return {}, []
        self.listener.on_partition_keys_maybe_revoked(partitions)
        self.listener.on_partitions_revoked(partitions)
        rows = self._positions_of(partitions, positions)
        return rows, self._expired_of(rows)

    def _revoked(self, partitions: list[TopicPartition], expired: list[ExpiredRange], change: MembershipChange) -> None:
        self.reported.extend(expired)
        self.owned -= set(partitions)
        change.given_up(partitions)

    def _positions_of(self, partitions: list[TopicPartition], positions: PositionsFn) -> dict[TopicPartition, int]:
        """Each partition's position: the consumer's, else the group's committed one, else -1."""
        where = positions()
        committed: dict[TopicPartition, int] = {}
        for topic in {tp.topic for tp in partitions if tp not in where}:
            found = self.tables.offsets.committed(self.group, topic)
            committed.update({TopicPartition(topic=topic, partition=p): o for p, o in found.items()})
        return {tp: where.get(tp, committed.get(tp, -1)) for tp in partitions}

    def _expired_of(self, rows: dict[TopicPartition, int]) -> list[ExpiredRange]:
        """What an owner must report expired of its partitions (``rows``: partition -> position, -1 unknown)."""
        out: list[ExpiredRange] = []
        for topic in sorted({tp.topic for tp in rows}):
            snap = self.tables.snapshots([topic]).get(topic)
            if snap is None:
                continue
            numbers = [tp.partition for tp in rows if tp.topic == topic]
            known = {tp.partition: o for tp, o in rows.items() if tp.topic == topic and o >= 0}
            out += unreported_expiry(topic, snap, numbers, known,
                                     lambda: self.tables.retired_between(topic, -1, snap.topic_version),
                                     lambda: self.tables.offsets.expired(self.group, topic))
        return out

    def _lose(self, change: MembershipChange, why: str) -> None:
        """Expelled: drop every partition without committing (Kafka's onPartitionsLost)."""
        lost = sorted(self.owned | set(self.pending), key=str)
        self.owned.clear()
        self.pending.clear()
        self.warm.clear()
        self.generation = 0
        self.joining = None
        if lost:
            change.given_up(lost, lost=True)
            self.listener.on_partitions_lost(lost)

    def _beat_now(self, state: MemberState | None = None) -> MemberHeartbeat:
        """Heartbeat: a full row when this member's state changed, else a cheap tick."""
        if state is None:
            state = MemberState.JOINING if self.joining is not None else MemberState.STABLE
        beat = MemberHeartbeat(
            group=self.group, member_id=self.member_id, state=state, generation=self.generation,
            joining=self.joining, protocol=self.protocol, assignor=self.settings.assignor, topics=self.topics,
            owned=sorted(self.owned, key=str), previous=sorted(self.previous, key=str),
            warm_ready=sorted(self.warm_ready, key=str), warmup=self.settings.warmup,
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
