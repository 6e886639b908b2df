"""Consumer groups without a broker: membership, generations and fencing in Delta tables.

Kafka's group coordinator becomes three tables and one rule set that every member runs:

- ``group_members``: each member appends heartbeats (join, stable, left). A member whose
  latest heartbeat is older than its session timeout is expelled.
- ``group_generations``: one row per generation, written by its leader with a conditional insert
  on (group, generation), so exactly one assignment exists per generation.
- ``offset_commits``: positions and ownership claims, fenced by the group's generation (see
  control_plane.offsets), so an expelled member can neither commit nor claim.

A rebalance (a member joins, leaves, dies, or the topic's partitions change): every member
sees it, *eager* members revoke everything and commit, *cooperative* members keep what they
own; each joins the next generation with a heartbeat. When every live member has joined (or
the rebalance timeout passed), the member with the smallest id leads: it assigns undeleted and
marked partitions as two lists (rule 11), withholds partitions that move under the cooperative
protocol (their owner revokes them, then a follow-up rebalance hands them over), applies the
source's rules for members on mixed protocols, writes the generation and raises the fence.
"""

from __future__ import annotations

import itertools
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from pydantic import BaseModel, Field
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.assignors import Subscription, assign_lists, assignor
from control_plane.layout import RootLayout
from control_plane.liveness import Liveness
from control_plane.offsets import GroupOffsets, PartitionLag, expired_ranges
from control_plane.records import (
    CommitKind,
    ExpiredRange,
    GenerationMember,
    GenerationRecord,
    Handover,
    MemberAssignment,
    MemberHeartbeat,
    MemberState,
    PartitionPosition,
    TopicEvent,
    TopicPartition,
)
from control_plane.tables import TABLES, ControlTables
from control_plane.topics import TopicAdmin
from log_store.config import GroupSettings
from log_store.errors import ConcurrentAppendError, IllegalGenerationError, InvalidConfigurationError, UnknownGroupError
from log_store.delta_txn import DeltaTransaction, app_version_changes, table_version
from log_store.crash import crash_point
from log_store.topic_log import LogSnapshot, Mode, TopicLog

EAGER, COOPERATIVE, MIXED = "eager", "cooperative", "mixed"


# -- the tables ------------------------------------------------------------------------------
class GroupTables:
    """Reads and writes of the group tables for one root.

    Reads are cached per table version (a cheap listing), so a member polling a quiet group
    runs no Spark job; heartbeats are read incrementally from the heartbeat table's commits.
    """

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.tables = ControlTables(spark, RootLayout(root))
        self.offsets = GroupOffsets(spark, root)
        self.topics = TopicAdmin(spark, root)
        self._cache: dict[tuple, tuple[int, object]] = {}
        self._ticks: dict[str, tuple[int, int | None]] = {}
        self._ticks_version: int | None = None

    def _cached(self, table: str, key: tuple, load: Callable[[], object]) -> object:
        version = table_version(self.spark, self.tables.path(table))
        hit = self._cache.get((table, *key))
        if hit and hit[0] == version:
            return hit[1]
        value = load()
        self._cache[(table, *key)] = (version, value)
        return value

    def heartbeat(self, beat: MemberHeartbeat) -> None:
        """A member's state changed: append its full heartbeat row."""
        self.tables.append("group_members", [beat.model_dump()])

    def tick(self, group: str, member_id: str, beat: int) -> None:
        """A member is alive: one commit setting its heartbeat counter to ``beat``, no data written."""
        self.tables.ensure()
        txn = DeltaTransaction.start(self.spark, self.tables.path("group_heartbeats"))
        txn.commit({f"{_TICK}{group}.{member_id}": beat})

    def ticks(self, group: str) -> dict[str, tuple[int, int | None]]:
        """Latest heartbeat counter of each member, with the writer's epoch ms (for display only),
        read from new commits only."""
        path = self.tables.path("group_heartbeats")
        version = table_version(self.spark, path)
        if version < 0:
            return {}
        since = self._ticks_version if self._ticks_version is not None else max(version - 2000, -1)
        if version > since:
            self._ticks.update(app_version_changes(self.spark, path, since, _TICK))
            self._ticks_version = version
        prefix = f"{_TICK}{group}."
        return {k[len(prefix):]: v for k, v in self._ticks.items() if k.startswith(prefix)}

    def member_states(self, group: str) -> dict[str, MemberHeartbeat]:
        """Each member's latest state row, latest in commit order (never by the writers' clocks)."""
        def load() -> dict[str, MemberHeartbeat]:
            if not self.tables.exists("group_members"):
                return {}
            rows = (
                self.tables.read("group_members").where(F.col("group") == group)
                .groupBy("member_id").agg(F.max_by(F.struct("*"), F.col("_metadata.row_commit_version")).alias("r"))
                .select("r.*").collect()
            )
            return {r["member_id"]: MemberHeartbeat.model_validate(r.asDict(recursive=True)) for r in rows}

        return self._cached("group_members", (group,), load)

    def generation(self, group: str) -> GenerationRecord | None:
        gens = self.generations(group)
        return gens[-1] if gens else None

    def generations(self, group: str) -> list[GenerationRecord]:
        def load() -> list[GenerationRecord]:
            rows = self.tables.read("group_generations").where(F.col("group") == group).orderBy("generation").collect()
            return [GenerationRecord.model_validate(r.asDict(recursive=True)) for r in rows]

        return self._cached("group_generations", (group,), load)

    def propose(self, record: GenerationRecord) -> bool:
        """Write a generation if nobody wrote that number first (one leader per generation).

        The compare-and-set is the table property ``lakelog.generation.<group>``, read and raised
        in the same commit as the row: cheaper than a MERGE, and any concurrent proposal conflicts.
        """
        self.tables.ensure()
        prop = f"lakelog.generation.{record.group}"
        for _ in range(20):
            txn = DeltaTransaction.start(self.spark, self.tables.path("group_generations"))
            if int(txn.configuration().get(prop, 0)) >= record.generation:
                return False
            txn.set_properties({prop: str(record.generation)})
            txn.write(self.spark.createDataFrame([record.model_dump()], TABLES["group_generations"]))
            try:
                txn.commit({}, f'{{"lakelog": "generation", "group": "{record.group}", "generation": {record.generation}}}')
                return True
            except ConcurrentAppendError:
                continue
        return False

    def snapshots(self, topics: Iterable[str]) -> dict[str, LogSnapshot]:
        """Each existing subscribed topic's log snapshot (metadata, log ends, topic version)."""
        current = self._cached("topics", (), self.topics.current)
        return {t: TopicLog(self.spark, current[t].location).snapshot(ends=False) for t in sorted(set(topics)) if t in current}

    def partition_lists(self, topics: Iterable[str], snaps: dict[str, LogSnapshot] | None = None
                        ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Undeleted (ReadWrite) and marked (ReadOnly) partitions of the subscribed topics."""
        undeleted: list[TopicPartition] = []
        marked: list[TopicPartition] = []
        for topic, snap in (snaps if snaps is not None else self.snapshots(topics)).items():
            for p, pm in sorted(snap.metadata.partitions.items()):
                tp = TopicPartition(topic=topic, partition=p)
                if pm.mode is Mode.READ_WRITE:
                    undeleted.append(tp)
                elif pm.mode is Mode.READ_ONLY:
                    marked.append(tp)
        return undeleted, marked

    def retired_between(self, topic: str, after: int, upto: int) -> list[tuple[int, int, int]]:
        """Partition incarnations (partition, start, end) of ``topic`` retired by a record with a
        version in (``after``, ``upto``]."""
        out = []
        history = self.topics.history(topic)
        for prev, cur in zip(history, history[1:]):
            if after < cur.topic_version <= upto and cur.event is TopicEvent.RETIRE:
                was = {p.partition: p for p in prev.partitions}
                out += [(p.partition, p.start_offset, p.end_offset) for p in cur.partitions
                        if p.mode is Mode.NONE and p.end_offset is not None
                        and p.partition in was and was[p.partition].mode is not Mode.NONE]
        return out

    def handed_over(self, group: str, handover: Handover, generation: int) -> bool:
        """True once the previous owner committed its revocation of the partition."""
        if not self.tables.exists("offset_commits"):
            return False
        found = (
            self.tables.read("offset_commits")
            .where(
                (F.col("group") == group) & (F.col("topic") == handover.topic)
                & (F.col("partition") == handover.partition) & (F.col("member_id") == handover.from_member)
                & (F.col("kind") == CommitKind.REVOKE.value) & (F.col("generation") >= generation)
            )
            .limit(1)
            .count()
        )
        return found > 0


_TICK = "lakelog.heartbeat."


# -- the leader's rules ------------------------------------------------------------------------
def plan_generation(
    group: str,
    generation: int,
    joined: list[MemberHeartbeat],
    undeleted: list[TopicPartition],
    marked: list[TopicPartition],
    assignor_name: str,
    leader: str,
    reason: str,
    rebalance_ms: int = 0,
    previous: GenerationRecord | None = None,
) -> GenerationRecord:
    """The leader's assignment for ``generation`` from the members' join heartbeats.

    All cooperative: the assignor plans from what members own; partitions moving between two
    members are withheld (the owner revokes them; a follow-up rebalance hands them over), or
    become warm-up copies for members that asked for warm-up, and move directly (a hand-over)
    once the new owner reports it caught up. All eager: members revoked everything; the
    assignor plans from what they last owned. Mixed (an upgrade in progress): cooperative
    members get back what they own, eager members get nothing (the source's rule), so no
    partition can have two owners while members disagree on the protocol.
    """
    assignor(assignor_name)  # unknown names fail before anything is written
    protocols = {m.protocol for m in joined}
    protocol = protocols.pop() if len(protocols) == 1 else MIXED
    lists = [undeleted, marked]
    valid = set(undeleted) | set(marked)
    final: dict[str, list[TopicPartition]] = {m.member_id: [] for m in joined}
    warmups: dict[str, list[TopicPartition]] = {m.member_id: [] for m in joined}
    handovers: list[Handover] = []
    owners = {tp: m.member_id for m in joined for tp in m.owned if tp in valid}
    if protocol == COOPERATIVE:
        subs = [Subscription(member_id=m.member_id, topics=m.topics, owned=m.owned) for m in joined]
        target = assign_lists(assignor_name, subs, lists)
        by_id = {m.member_id: m for m in joined}
        for member, tps in target.items():
            for tp in tps:
                owner = owners.get(tp)
                if owner is None or owner == member:
                    final[member].append(tp)
                elif tp in by_id[member].warm_ready:
                    final[member].append(tp)
                    handovers.append(Handover(topic=tp.topic, partition=tp.partition, from_member=owner, to_member=member))
                elif by_id[member].warmup:
                    final[owner].append(tp)  # the owner keeps it while the new owner warms up
                    warmups[member].append(tp)
        revoked = sum(1 for tp, owner in owners.items() if tp not in final[owner])
    elif protocol == EAGER:
        subs = [Subscription(member_id=m.member_id, topics=m.topics, owned=m.previous) for m in joined]
        final = assign_lists(assignor_name, subs, lists)
        revoked = len(previous.owner()) if previous else 0
    else:
        for m in joined:
            if m.protocol == COOPERATIVE:
                final[m.member_id] = [tp for tp in m.owned if tp in valid]
        revoked = len(previous.owner()) - sum(len(v) for v in final.values()) if previous else 0
    return GenerationRecord(
        group=group,
        generation=generation,
        protocol=protocol,
        assignor=assignor_name,
        leader=leader,
        members=[GenerationMember(member_id=m.member_id, protocol=m.protocol, topics=m.topics, owned=m.owned) for m in joined],
        assignment=[MemberAssignment(member_id=m, partitions=_sorted(final[m]), warmups=_sorted(warmups[m])) for m in sorted(final)],
        partitions=undeleted,
        marked=marked,
        handovers=handovers,
        revoked=max(revoked, 0),
        rebalance_ms=rebalance_ms,
        reason=reason,
    )


def _sorted(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    return sorted(set(tps), key=lambda tp: (tp.topic, tp.partition))


# -- one member --------------------------------------------------------------------------------
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


class MembershipChange(BaseModel):
    """What one poll changed for this member."""

    generation: int
    assigned: list[TopicPartition] = Field(default_factory=list)
    revoked: list[TopicPartition] = Field(default_factory=list)
    lost: list[TopicPartition] = Field(default_factory=list)
    warmups: list[TopicPartition] = Field(default_factory=list)
    rebalancing: bool = False

    def given_up(self, partitions: list[TopicPartition], lost: bool = False) -> None:
        """Partitions revoked (or lost) in this poll. One poll can assign a partition and then
        revoke it (an eager member adopts generation N, then rejoins for N+1): the consumer
        applies revocations before assignments, so a partition given up after it was assigned
        must not stay in ``assigned``, or the consumer would deliver it without owning it."""
        (self.lost if lost else self.revoked).extend(partitions)
        gone = set(partitions)
        self.assigned = [tp for tp in self.assigned if tp not in gone]


PositionsFn = Callable[[], dict[TopicPartition, int]]


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
        self._unassigned_since: float | None = time.time()
        self._last_beat = 0.0
        self._last_lists = 0.0
        self._last_row: dict | None = None
        self.published: dict[TopicPartition, int] = {}
        self.liveness = Liveness()
        # The group's positions on a topic when this member leads (the consumer adds its sink's).
        self.group_positions = group_positions or (lambda topic: self.tables.offsets.committed(self.group, topic))
        self.reported: list[ExpiredRange] = []  # expiry reports this member wrote
        # Heartbeat counts start at a random point, so a restarted member with the same id is seen to move.
        self._beats = itertools.count(random.getrandbits(30) << 32)
        self.last_generation: GenerationRecord | None = None
        self._stopped = threading.Event()
        threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{self.member_id}", daemon=True).start()

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
            self._lead(gen, live, reason)
        elif time.time() - self._last_beat >= self.settings.heartbeat_interval_ms / 1000:
            self._beat_now()
        change.generation = self.generation
        self._track_unassigned()
        return change

    def _heartbeat_loop(self) -> None:
        """Kafka's heartbeat thread: keeps the member alive while a long batch runs. A member
        stuck longer than the rebalance timeout is still left out of the next generation."""
        interval = self.settings.heartbeat_interval_ms / 1000
        while not self._stopped.wait(interval / 2):
            if self.generation > 0 or self.joining is not None:
                if time.time() - self._last_beat >= interval:
                    try:
                        self.tables.tick(self.group, self.member_id, next(self._beats))
                        self._last_beat = time.time()
                    except Exception:  # the next poll heartbeats (and reports) anyway
                        pass

    def commit(self, positions: dict[TopicPartition, int]) -> MembershipChange:
        """Commit positions of owned partitions under this member's generation (fenced).

        If the group moved on to a generation this member joined (a cooperative member keeps
        delivering while it rebalances), adopt it and commit what it still owns; if the member
        was left out, its partitions are lost and IllegalGenerationError is raised.
        """
        change = MembershipChange(generation=self.generation)
        for _ in range(3):
            owned = {tp: o for tp, o in positions.items() if tp in self.owned}
            try:
                self.tables.offsets.commit_positions(self.group, owned, self.generation, self.member_id)
                return change
            except IllegalGenerationError:
                gen = self.tables.generation(self.group)
                if not (gen and self.joining is not None and self.member_id in gen.member_ids() and gen.generation >= self.joining):
                    self._lose(change, "commit fenced")
                    raise
                self._adopt(gen, lambda: positions, change)
        return change

    def close(self, positions: PositionsFn = dict) -> None:
        """Leave the group: revoke and commit everything, then say so (Kafka's LeaveGroup)."""
        change = MembershipChange(generation=self.generation)
        self._revoke(sorted(self.owned, key=str), positions, change)
        self.joining = None
        self._stopped.set()
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
        if time.time() - self._last_lists >= self.settings.heartbeat_interval_ms / 1000:
            self._last_lists = time.time()
            undeleted, marked = self.tables.partition_lists(self.topics)
            if set(undeleted) != set(gen.partitions) or set(marked) != set(gen.marked):
                return "topic partitions changed"
        return None

    def _join(self, target: int, positions: PositionsFn, change: MembershipChange) -> None:
        if self.protocol == EAGER:
            self._revoke(sorted(self.owned, key=str), positions, change)
            self.warm.clear()
        self.joining = target
        self.joining_since = time.time()
        self.followup = False

    def _lead(self, gen: GenerationRecord | None, live: dict[str, MemberHeartbeat], reason: str) -> None:
        """If every live member joined the target (or the rebalance timed out) and this member
        has the smallest id among those joined, write the generation and raise the fence."""
        target = self.joining
        joined = [b for b in live.values() if b.joining == target and b.state == MemberState.JOINING.value]
        if not joined or min(b.member_id for b in joined) != self.member_id:
            return
        waited_ms = (time.time() - self.joining_since) * 1000
        if len(joined) < len(live) and waited_ms < self.settings.rebalance_timeout_ms:
            return
        snaps = self.tables.snapshots(self.topics)
        undeleted, marked = self.tables.partition_lists(self.topics, snaps)
        versions = {t: snap.topic_version for t, snap in snaps.items()}
        record = plan_generation(
            self.group, target, sorted(joined, key=lambda b: b.member_id), undeleted, marked,
            self.settings.assignor, self.member_id, reason, int(waited_ms), gen,
        ).model_copy(update={"topic_versions": versions, "expired": self._expired_since(gen, versions, joined)})
        if self.tables.propose(record):
            crash_point("group:after_propose")
            if self.tables.offsets.raise_fence(self.group, target, self.member_id, record.expired):
                self.reported.extend(record.expired)

    def _expired_since(self, gen: GenerationRecord | None, versions: dict[str, int],
                       joined: list[MemberHeartbeat]) -> list[ExpiredRange]:
        """The records of partitions retired since the previous generation that the group had not
        delivered, for partitions no joined member owns (an owner reports its own on revoking).

        A group's view starts at its first generation (or at the first one that subscribed to a
        topic): partitions retired before it were never the group's to deliver.
        """
        if gen is None:
            return []
        owned = {tp for b in joined for tp in b.owned}
        out: list[ExpiredRange] = []
        for topic, upto in versions.items():
            after = gen.topic_versions.get(topic)
            if after is None:
                continue
            retired = [r for r in self.tables.retired_between(topic, after, upto)
                       if TopicPartition(topic=topic, partition=r[0]) not in owned]
            if retired:
                out += expired_ranges(topic, retired, self.group_positions(topic),
                                      self.tables.offsets.expired(self.group, topic))
        return out

    def _adopt(self, gen: GenerationRecord, positions: PositionsFn, change: MembershipChange) -> None:
        """Take the new generation's assignment: revoke what left, claim what came."""
        if self.tables.offsets.raise_fence(self.group, gen.generation, gen.leader, gen.expired):  # if the leader died first
            self.reported.extend(gen.expired)
        mine = set(gen.partitions_of(self.member_id))
        self.generation = gen.generation
        self.joining = None
        self.rebalances += 1
        gone = sorted(self.owned - mine, key=str)
        if gone:
            self._revoke(gone, positions, change)
            handed = {TopicPartition(topic=h.topic, partition=h.partition) for h in gen.handovers}
            # Withheld partitions reach their new owner in a follow-up rebalance; hand-overs don't need one.
            self.followup = gen.protocol == COOPERATIVE and bool(set(gone) - handed)
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
        self._acquire(claim, kept, change)
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
        self.listener.on_partition_keys_maybe_revoked(partitions)
        self.listener.on_partitions_revoked(partitions)
        where = positions()
        committed: dict[TopicPartition, int] = {}
        for topic in {tp.topic for tp in partitions if tp not in where}:
            found = self.tables.offsets.committed(self.group, topic)
            committed.update({TopicPartition(topic=topic, partition=p): o for p, o in found.items()})
        rows = {tp: where.get(tp, committed.get(tp, -1)) for tp in partitions}
        expired = self._expired_on_revoke(rows)
        try:
            self.tables.offsets.commit_positions(self.group, rows, self.generation, self.member_id, CommitKind.REVOKE,
                                                 expired)
        except IllegalGenerationError:
            self._lose(change, "revocation fenced")
            return
        crash_point("group:after_revoke")
        self.reported.extend(expired)
        self.owned -= set(partitions)
        change.given_up(partitions)

    def _expired_on_revoke(self, rows: dict[TopicPartition, int]) -> list[ExpiredRange]:
        """An owner giving up a retired partition it had not read to the end reports the rest."""
        out: list[ExpiredRange] = []
        for topic in sorted({tp.topic for tp in rows}):
            snap = self.tables.snapshots([topic]).get(topic)
            if snap is None:
                continue
            retired = [(tp.partition, pm.start_offset, pm.end_offset) for tp in rows if tp.topic == topic
                       and (pm := snap.metadata.partitions.get(tp.partition)) is not None
                       and pm.mode is Mode.NONE and pm.end_offset is not None]
            if retired:
                positions = {tp.partition: o for tp, o in rows.items() if tp.topic == topic and o >= 0}
                out += expired_ranges(topic, retired, positions, self.tables.offsets.expired(self.group, topic))
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
            self.tables.heartbeat(beat.model_copy(update={"beat": next(self._beats)}))
            self._last_row = content
        else:
            self.tables.tick(self.group, self.member_id, next(self._beats))
        self._last_beat = time.time()
        return beat

    def _track_unassigned(self) -> None:
        now = time.time()
        if self.owned:
            if self._unassigned_since is not None:
                self.unassigned_ms += int((now - self._unassigned_since) * 1000)
                self._unassigned_since = None
        elif self._unassigned_since is None:
            self._unassigned_since = now


# -- describe ----------------------------------------------------------------------------------
class MemberDescription(BaseModel):
    member_id: str
    host: str
    protocol: str
    state: str
    live: bool
    partitions: list[str]
    warmups: list[str]
    last_heartbeat: str  # UTC, as the member's own clock wrote it
    heartbeat_age_s: float
    unassigned_ms: int
    rebalances: int


class GroupDescription(BaseModel):
    group: str
    state: str  # Stable, PreparingRebalance, Empty
    generation: int
    protocol: str
    assignor: str
    leader: str
    rebalances: int
    revoked_last: int
    revoked_total: int
    members: list[MemberDescription]
    partitions: list[PartitionLag]
    expired: list[ExpiredRange] = []  # records retired before the group read them (reported, never silent)


def describe_group(spark: SparkSession, root: str, group: str) -> GroupDescription:
    """Members, generation, protocol, each member's partitions, committed offsets and lag.

    For display only, a member's ``live`` and heartbeat age compare the epoch time its last
    heartbeat carries with this host's clock. The group's own decisions never do that: members
    judge each other by observation (control_plane.liveness).
    """
    tables = GroupTables(spark, root)
    gens = tables.generations(group)
    try:
        lags = tables.offsets.describe(group)
    except UnknownGroupError:
        if not gens:
            raise
        lags = []
    gen = gens[-1] if gens else None
    now_ms = time.time() * 1000
    beats = tables.member_states(group)
    ticks = tables.ticks(group)
    owner = {str(tp): m for tp, m in gen.owner().items()} if gen else {}
    members = []
    for m in sorted(beats.values(), key=lambda b: b.member_id):
        row_ms = m.heartbeat_at.replace(tzinfo=timezone.utc).timestamp() * 1000  # naive datetimes are UTC
        last_ms = max(row_ms, ticks.get(m.member_id, (0, None))[1] or 0)
        age_s = max(now_ms - last_ms, 0) / 1000
        live = m.state != MemberState.LEFT.value and age_s * 1000 <= m.session_timeout_ms
        if not live and (gen is None or m.member_id not in gen.member_ids()):
            continue
        members.append(MemberDescription(
            member_id=m.member_id, host=m.host, protocol=m.protocol, state=m.state, live=live,
            partitions=sorted((tp for tp, o in owner.items() if o == m.member_id)),
            warmups=[str(tp) for tp in gen.warmups_of(m.member_id)] if gen else [],
            last_heartbeat=datetime.fromtimestamp(last_ms / 1000, timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds"),
            heartbeat_age_s=round(age_s, 1), unassigned_ms=m.unassigned_ms, rebalances=m.rebalances,
        ))
    live_ids = {m.member_id for m in members if m.live}
    if not live_ids:
        state = "Empty"
    elif gen and live_ids == gen.member_ids() and not any(b.joining for b in beats.values() if b.member_id in live_ids):
        state = "Stable"
    else:
        state = "PreparingRebalance"
    return GroupDescription(
        group=group, state=state, generation=gen.generation if gen else 0, protocol=gen.protocol if gen else "",
        assignor=gen.assignor if gen else "", leader=gen.leader if gen else "", rebalances=len(gens),
        revoked_last=gen.revoked if gen else 0, revoked_total=sum(g.revoked for g in gens),
        members=members, partitions=lags, expired=tables.offsets.expired_ranges(group),
    )


# -- what a group was to deliver ---------------------------------------------------------------
class DeliveryView(BaseModel):
    """What ``group`` owes on ``topic``: every record ever appended, except the partition
    incarnations retired before the group's first generation (``before_view``: partition -> end
    of the last one), and less what it reported expired."""

    group: str
    topic: str
    first_topic_version: int
    before_view: dict[int, int]
    expired: list[ExpiredRange]


def delivery_view(spark: SparkSession, root: str, group: str, topic: str) -> DeliveryView:
    tables = GroupTables(spark, root)
    first = next((g.topic_versions[topic] for g in tables.generations(group) if topic in g.topic_versions), 0)
    before: dict[int, int] = {}
    for p, _start, end in tables.retired_between(topic, 0, first):
        before[p] = max(before.get(p, 0), end)
    expired = [r for r in tables.offsets.expired_ranges(group) if r.topic == topic]
    return DeliveryView(group=group, topic=topic, first_topic_version=first, before_view=before, expired=expired)


# -- history checks ----------------------------------------------------------------------------
def ownership_violations(spark: SparkSession, root: str, group: str) -> list[str]:
    """Replay the group's claims and commits in commit order; return every broken rule.

    Rules: no two members claim a partition under one generation; a new claim never overlaps a
    claim of a member that stayed in every generation since and did not revoke it (a member left
    out of a generation was fenced: its claims lapsed); commits come from the owner; committed
    offsets never move backwards.
    """
    tables = GroupTables(spark, root)
    members_of = {g.generation: g.member_ids() for g in tables.generations(group)}
    rows = (
        spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
        .load(tables.tables.path("offset_commits"))
        .where((F.col("group") == group) & (F.col("_change_type") == "insert"))
        .orderBy("_commit_version", "committed_at")
        .collect()
    )
    problems: list[str] = []
    claims: dict[tuple[str, int], dict[str, int]] = {}
    last: dict[tuple[str, int], int] = {}
    for r in rows:
        if r["kind"] == CommitKind.GENERATION.value:
            continue
        tp, member, gen = (r["topic"], r["partition"]), r["member_id"], r["generation"]
        owners = claims.setdefault(tp, {})
        where = f"{tp[0]}-{tp[1]} at commit {r['_commit_version']}"
        if r["kind"] == CommitKind.ACQUIRE.value:
            for other, other_gen in owners.items():
                if other == member:
                    continue
                # A claim lapses when its holder is left out of any later generation (fenced).
                held = all(other in members_of.get(g, set()) for g in range(other_gen, gen + 1))
                if other_gen == gen:
                    problems.append(f"{where}: {member} and {other} both own it in generation {gen}")
                elif held:
                    problems.append(f"{where}: {member} claimed it in generation {gen} while {other} "
                                    f"(a member of it) still held it from generation {other_gen}")
            owners[member] = gen
        elif gen > 0 and member not in owners:
            problems.append(f"{where}: {member} committed {r['kind']} without owning it")
        if r["kind"] == CommitKind.REVOKE.value:
            owners.pop(member, None)
        if r["offset"] >= 0:
            if r["offset"] < last.get(tp, -1):
                problems.append(f"{where}: committed offset moved back from {last[tp]} to {r['offset']} ({member})")
            last[tp] = max(last.get(tp, -1), r["offset"])
    return problems


def list_groups(spark: SparkSession, root: str) -> list[dict]:
    """Every group that ever had a generation or a commit, with its latest generation."""
    tables = GroupTables(spark, root)
    names = set(tables.offsets.groups())
    names.update(r["group"] for r in tables.tables.read("group_generations").select("group").distinct().collect())
    out = []
    for name in sorted(names):
        gen = tables.generation(name)
        out.append({"group": name, "generation": gen.generation if gen else 0, "protocol": gen.protocol if gen else "",
                    "assignor": gen.assignor if gen else "", "members": len(gen.members) if gen else 0})
    return out
