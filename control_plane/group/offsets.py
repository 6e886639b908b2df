"""Consumer groups' committed positions (Kafka's ``__consumer_offsets``, as a Delta table).

The same table holds the generation fence of every group: the application version
``lakelog.fence.<group>`` (a table property in earlier releases; ``ControlTables.counted``),
raised to a new generation by the first commit that adopts it (the leader's, with its own claims,
unless it died first; then another member's). A member's fenced commit reads the fence inside its
own Delta transaction and depends on it, so a raise committed meanwhile makes the commit fail and
retry against the new fence. So a commit from an older generation (an expelled member, a zombie)
is always rejected. Ownership claims (acquire, revoke) are rows of the same fenced kind, so the
table's history shows who owned what and when.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.records import CommitKind, ExpiredRange, OffsetCommit, TopicPartition
from control_plane.tables import ORDER_TIEBREAK, ControlTables, commit_key, counted, latest_rows, latest_position_rows, reduced_commits
from control_plane.topics import TopicAdmin
from log_store.delta_errors import retry_on_conflict
from log_store.errors import IllegalGenerationError, UnknownGroupError
from log_store.names import check_group_name, commit_metadata, fence_property
from log_store.log_metadata import LogSnapshot, Mode

CONTROLLER = "lakelog-controller"  # the member id of rows the controller writes for a group




def owed_expiry(topic: str, retired: Iterable[tuple[int, int, int]], positions: dict[int, int],
                   reported: set[tuple[int, int]]) -> list[ExpiredRange]:
    """What a group must report expired: for each retired partition incarnation (partition,
    start, end) where the group's position is below the end, unless already reported (partition,
    end). A partition without a position was not read at all: everything from its start expired."""
    out = []
    for p, start, end in sorted(retired):
        first = max(positions.get(p, start), start)
        if first < end and (p, end) not in reported:
            out.append(ExpiredRange(topic=topic, partition=p, first=first, end=end))
    return out


def unreported_expiry(topic: str, snap: LogSnapshot, partitions: Iterable[int], positions: dict[int, int],
                      history: Callable[[], list[tuple[int, int, int]]],
                      reported: Callable[[], set[tuple[int, int]]],
                      retired_since: Callable[[], list[tuple[int, int, int]]] | None = None) -> list[ExpiredRange]:
    """What a reader must still report expired (the records it passed without delivering): the
    one rule for the stream planner, the standalone consumer and a group member's owned
    partitions. Of ``partitions`` (``positions``: where it stands on them, where known):
    ``owed_expiry`` over the incarnations retired in ``snap`` and, where a number was grown back
    past the position, the ones the topic's ``history`` (partition, start, end) shows retired in
    between (campaign seed 18); the records retention or delete-records removed below a
    position; and with ``retired_since`` (the incarnations retired since the reader's view began),
    those of partitions it never held a position on, all of whose records it skipped (a partition
    grown, written, shrunk and retired while a stream was stopped). ``history``, ``reported`` and
    ``retired_since`` are read only when needed."""
    parts = snap.metadata.partitions
    partitions = list(partitions)
    retired = {(p, pm.start_offset, pm.end_offset) for p in partitions
               if (pm := parts.get(p)) is not None and pm.mode is Mode.NONE and pm.end_offset is not None}
    if any(p in parts and parts[p].start_offset > o for p, o in positions.items()):
        retired |= {r for r in history() if r[0] in positions}
    # Records retention or delete-records removed below a position: owed as a retired range's are.
    # A partition without a position starts at its log start (auto.offset.reset): nothing is owed.
    retired |= {(p, *prefix) for p in partitions
                if p in positions and (prefix := snap.removed_prefix(p)) and positions[p] < prefix[1]}
    if retired_since is not None:
        retired |= {r for r in retired_since() if r[0] not in positions}
    return owed_expiry(topic, retired, positions, reported()) if retired else []


class PartitionLag(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int
    lag: int


def partition_lags(root: str, group: str, committed: dict[str, dict[int, int]],
                   log_snapshot: Callable[[str], LogSnapshot]) -> list[PartitionLag]:
    """Committed offset, log end and lag per partition of each topic in ``committed`` (topic ->
    partition -> position); the one rule behind ``groups describe``, whichever reader read them.

    Lag counts what the group can still read: from its position, or from the partition's log
    start where it has none or stands below it (a number grown back over a retired one starts at
    the old end; what the group had not read there expired and is reported apart)."""
    if not committed:
        raise UnknownGroupError(
            f"unknown group '{group}' under {root}: it has never committed; `lakelog groups list` shows known groups")
    out: list[PartitionLag] = []
    for topic in sorted(committed):
        snap = log_snapshot(topic)
        starts = snap.earliest_offsets()
        for p, end in sorted(snap.log_ends.items()):
            pos = committed[topic].get(p)
            start = starts.get(p, 0)
            out.append(PartitionLag(topic=topic, partition=p, committed_offset=pos, log_end_offset=end,
                                    lag=max(end - max(start if pos is None else pos, start), 0)))
    return out


@dataclass
class GroupTopicState:
    """One group's state on one topic, as ``offset_commits`` holds it: the next offset to
    deliver per partition, the (partition, end) of each range it reported expired, and each
    partition's incarnation (see ``GroupOffsets.incarnations``)."""

    committed: dict[int, int] = field(default_factory=dict)
    expired: set[tuple[int, int]] = field(default_factory=set)  # reported by the group's readers
    # reported for the group by a retirement (member ``CONTROLLER``): readers still report (and
    # count, and fail on, as a stream's ``failOnDataLoss``) what they pass of these themselves
    expired_at_retirement: set[tuple[int, int]] = field(default_factory=set)
    incarnations: dict[int, int] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)  # the leader epoch each position was read under, if known

    @classmethod
    def of(cls, group: str, topic: str, rows: list[dict]) -> "GroupTopicState":
        """From ``offset_commits`` rows (plain, or ``reduced_commits``: each with ``_order``, its
        place in commit order), of which those with ``state_row`` count."""
        rows = [r for r in rows if state_row(group, topic, r)]
        positions = latest_position_rows(rows)
        committed = {p: int(r["offset"]) for (g, t, p), r in positions.items() if g == group and t == topic}
        reports = [r for r in rows if r["kind"] == CommitKind.EXPIRED.value]
        expired = {(r["partition"], commit_key(r)) for r in reports if r.get("member_id") != CONTROLLER}
        at_retirement = {(r["partition"], commit_key(r)) for r in reports if r.get("member_id") == CONTROLLER}
        # one per group deletion, one per topic deletion (named by its version), one per reset
        deletions = (sum(r.get("n", 1) for r in rows if r["kind"] == CommitKind.DELETED.value)
                     + len({r["offset"] for r in rows if r["kind"] == CommitKind.TOPIC_DELETED.value}))
        resets: dict[int, int] = {}
        for r in rows:
            if r["kind"] == CommitKind.RESET.value:
                resets[r["partition"]] = resets.get(r["partition"], 0) + r.get("n", 1)
        out = {p: n + deletions for p, n in resets.items()}
        epochs = {p: int(r["leader_epoch"]) for (g, t, p), r in positions.items()
                  if g == group and t == topic and r.get("leader_epoch") is not None}
        return cls(committed, expired, at_retirement, {-1: deletions, **out} if deletions or out else {}, epochs)


def state_row(group: str, topic: str, r: dict) -> bool:
    """Whether an offset_commits row bears on ``group``'s state on ``topic``: the group's rows on
    the topic, its deletions, and the topic's deletions."""
    kind = r["kind"]
    return ((r["group"] == group and (r["topic"] == topic or kind == CommitKind.DELETED.value))
            or (r["topic"] == topic and kind == CommitKind.TOPIC_DELETED.value))


class GroupOffsets:
    """Commit and fetch positions for consumer groups under one root."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.layout = RootLayout(root)
        self.tables = ControlTables(spark, self.layout)
        # (topic, partition) -> the leader epoch of the snapshot this process last delivered a
        # partition's records from: written with the positions it commits (``read_under``)
        self.epochs: dict[tuple[str, int], int] = {}

    def read_under(self, topic: str, epochs: dict[int, int]) -> None:
        """The leader epochs this process's positions on ``topic`` were read under from now on."""
        self.epochs.update({(topic, p): e for p, e in epochs.items()})

    def commit(self, group: str, topic: str, offsets: dict[int, int], generation: int = 0, member_id: str = "") -> None:
        """Record the next offset to deliver for each partition, in one commit."""
        positions = {TopicPartition(topic=topic, partition=p): o for p, o in offsets.items()}
        self.commit_positions(group, positions, generation, member_id)

    def commit_positions(
        self,
        group: str,
        positions: dict[TopicPartition, int],
        generation: int = 0,
        member_id: str = "",
        kind: CommitKind = CommitKind.COMMIT,
        expired: list[ExpiredRange] = (),
        epochs: dict[tuple[str, int], int] | None = None,
    ) -> None:
        """Commit positions (or claims) in one commit; fenced when ``generation`` > 0. ``epochs``:
        the leader epoch each position was read under, (topic, partition) -> epoch (default: what
        ``read_under`` recorded; a Kafka client's committed leader epoch through the server).

        Raises IllegalGenerationError when the group's fence is past ``generation``. A member
        outside any group (generation 0, a standalone consumer) commits without the fence.
        """
        check_group_name(group)
        if not positions and not expired:
            return
        rows = self._position_rows(group, positions, generation, member_id, kind, epochs) + [
            self._expired_row(group, r, generation, member_id) for r in expired]
        self._write(group, rows, generation, member_id)

    def commit_members_positions(self, group: str, generation: int,
                                 commits: list[tuple[str, dict[TopicPartition, int], dict[tuple[str, int], int]]]) -> None:
        """Several members' positions (member id, positions, epochs) of one generation in one commit,
        fenced as ``commit_positions``: a server writes its queued OffsetCommits together."""
        check_group_name(group)
        rows = [r for member_id, positions, epochs in commits
                for r in self._position_rows(group, positions, generation, member_id, CommitKind.COMMIT, epochs)]
        if rows:
            self._write(group, rows, generation, commits[0][0])

    def _write(self, group: str, rows: list[dict], generation: int, member_id: str) -> None:
        if generation <= 0:
            self.tables.append("offset_commits", rows)
            return
        self._fenced(group, rows, generation, member_id, raise_version=None)

    def commit_once(self, group: str, positions: dict[TopicPartition, int], app_id: str, version: int,
                    generation: int = 0, member_id: str = "") -> bool:
        """Commit positions in one commit that raises application version ``app_id`` to ``version``,
        unless it is there already (then nothing: False). Unfenced, as Kafka writes a transaction's
        offsets at its commit marker: whoever finishes a transaction may commit its positions, once
        (the transaction coordinator; the generation was checked when they were sent)."""
        check_group_name(group)
        self.tables.ensure()
        rows = self._position_rows(group, positions, generation, member_id, CommitKind.COMMIT, {})

        def attempt() -> bool:
            txn = self.tables.rows_transaction("offset_commits")
            if counted(txn, app_id) >= version:
                txn.release()
                return False
            self.tables.write_labelled(txn, "offset_commits", rows)
            txn.commit({app_id: version}, commit_metadata("commit", group=group, generation=generation))
            return True

        return retry_on_conflict(attempt, attempts=50, backoff_ms=10)

    def fence(self, group: str) -> int:
        """The group's current generation fence (0 before its first generation)."""
        if not self.tables.exists("offset_commits"):
            return 0
        txn = self.tables.rows_transaction("offset_commits")
        try:
            return counted(txn, fence_property(group))
        finally:
            txn.release()

    def raise_fence(self, group: str, generation: int, leader: str, expired: list[ExpiredRange] = ()) -> bool:
        """Raise the fence to ``generation`` (idempotent); False if it already was there.

        The generation's expiry reports (decided by its leader) are written with the raise, so
        exactly once, whoever raises it first.
        """
        return self._fenced(group, [], generation, leader, raise_version=generation,
                            raise_rows=self._fence_rows(group, generation, leader, expired))

    def adopt(self, group: str, generation: int, leader: str, leader_expired: list[ExpiredRange], member_id: str,
              revoked: dict[TopicPartition, int], revoked_expired: list[ExpiredRange],
              claimed: list[TopicPartition]) -> bool:
        """A member's move to ``generation`` in one fenced commit (a membership step is
        one commit): the fence raised to it unless a member did already (with the leader's expiry
        reports, as ``raise_fence``), the member's revocations with their positions and its own
        expiry reports, and its claims. True if this commit raised the fence.

        Raises IllegalGenerationError when the group is past ``generation``.
        """
        rows = (self._position_rows(group, revoked, generation, member_id, CommitKind.REVOKE)
                + [self._expired_row(group, r, generation, member_id) for r in revoked_expired]
                + self._position_rows(group, dict.fromkeys(claimed, -1), generation, member_id, CommitKind.ACQUIRE))
        return self._fenced(group, rows, generation, member_id, raise_version=generation,
                            raise_rows=self._fence_rows(group, generation, leader, leader_expired))

    def _fence_rows(self, group: str, generation: int, leader: str, expired: list[ExpiredRange]) -> list[dict]:
        row = OffsetCommit(group=group, topic="", partition=-1, offset=generation, generation=generation,
                           member_id=leader, kind=CommitKind.GENERATION.value).model_dump()
        return [row] + [self._expired_row(group, r, generation, leader) for r in expired]

    def _position_rows(self, group: str, positions: dict[TopicPartition, int], generation: int, member_id: str,
                       kind: CommitKind, epochs: dict[tuple[str, int], int] | None = None) -> list[dict]:
        """One row per partition (a claim's offset is -1: unknown), in (topic, partition) order."""
        epochs = self.epochs if epochs is None else epochs
        return [OffsetCommit(group=group, topic=tp.topic, partition=tp.partition, offset=o, generation=generation,
                             member_id=member_id, kind=kind.value,
                             leader_epoch=epochs.get((tp.topic, tp.partition)) if o >= 0 else None).model_dump()
                for tp, o in sorted(positions.items(), key=lambda kv: (kv[0].topic, kv[0].partition))]

    @staticmethod
    def _expired_row(group: str, r: ExpiredRange, generation: int, member_id: str) -> dict:
        return OffsetCommit(group=group, topic=r.topic, partition=r.partition, offset=r.first, end_offset=r.end,
                            generation=generation, member_id=member_id, kind=CommitKind.EXPIRED.value).model_dump()

    def report_expired(self, group: str, ranges: list[ExpiredRange], generation: int = 0, member_id: str = "") -> None:
        """Record expired ranges (one commit; fenced when ``generation`` > 0)."""
        if not ranges:
            return
        self._write(group, [self._expired_row(group, r, generation, member_id) for r in ranges], generation, member_id)

    def expired(self, group: str, topic: str) -> set[tuple[int, int]]:
        """(partition, end) of every range ``group``'s readers reported expired on ``topic``."""
        return self.state(group, topic).expired

    def reported_anyhow(self, group: str, topic: str) -> set[tuple[int, int]]:
        """``expired`` and what retirements reported for ``group`` on ``topic``."""
        state = self.state(group, topic)
        return state.expired | state.expired_at_retirement

    def expired_ranges(self, group: str) -> list[ExpiredRange]:
        """Every range ``group`` reported expired, for ``groups describe`` and the audit; a range a
        retirement and a reader both reported, once."""
        if not self.tables.exists("offset_commits"):
            return []
        columns = ("topic", "partition", "offset", "end_offset")
        if self.tables.reads_without_spark("offset_commits"):  # delta-rs, no Spark job
            rows = {tuple(r[c] for c in columns) for r in self.tables.ordered_rows("offset_commits")
                    if r["group"] == group and r["kind"] == CommitKind.EXPIRED.value}
        else:
            rows = {tuple(r) for r in self.tables.read("offset_commits")
                    .where((F.col("group") == group) & (F.col("kind") == CommitKind.EXPIRED.value))
                    .select(*columns).distinct().collect()}
        return sorted((ExpiredRange(topic=t, partition=p, first=o, end=e) for t, p, o, e in rows),
                      key=lambda r: (r.topic, r.partition, r.first))

    def _fenced(self, group: str, rows: list[dict], generation: int, member_id: str, raise_version: int | None,
                raise_rows: list[dict] = ()) -> bool:
        """Write ``rows`` in one commit unless the group's fence is past ``generation``
        (IllegalGenerationError). With ``raise_version``, the same commit raises the fence to it
        and writes ``raise_rows`` too, unless the fence is there already; True if it raised it."""
        self.tables.ensure()
        fence_id = fence_property(group)

        def attempt() -> bool:
            txn = self.tables.rows_transaction("offset_commits")
            fence = counted(txn, fence_id)
            raising = raise_version is not None and fence < raise_version
            if not raising and not rows:
                txn.release()
                return False
            if fence > generation:
                raise IllegalGenerationError(
                    f"member '{member_id}' of group '{group}' acts on generation {generation}, but the group is "
                    f"on generation {fence}: it was expelled or missed a rebalance; it must rejoin"
                )
            written = [*raise_rows, *rows] if raising else list(rows)
            self.tables.write_labelled(txn, "offset_commits", written)
            kinds = ",".join(dict.fromkeys(r["kind"] for r in written))
            txn.commit({fence_id: raise_version} if raising else {}, commit_metadata(kinds, group=group, generation=generation))
            return raising

        return retry_on_conflict(attempt, attempts=50, backoff_ms=10)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """Latest committed offset per partition (empty if the group never committed).

        Latest in commit order (``control_plane.tables.ORDERED_TABLES``), never by the writers'
        clocks: two members' clocks may disagree, the table's commit order cannot.
        """
        return self.state(group, topic).committed

    def incarnations(self, group: str, topic: str) -> dict[int, int]:
        """How many times an operator moved each partition's position by hand (resets of it,
        deletions of the group and of the topic): a sink keys its positions by this, so a replay after a reset is
        written again instead of being taken for a duplicate. Partitions absent: the group's deletions."""
        return self.state(group, topic).incarnations

    def state(self, group: str, topic: str) -> "GroupTopicState":
        """``group``'s positions, expiry reports and incarnations on ``topic``, in one read.

        Where delta-rs reads the table, every row, in Python; otherwise ``reduced_commits`` of
        the rows that may bear on it, whatever the table's history. The rules are
        ``GroupTopicState.of``'s either way.
        """
        if not self.tables.exists("offset_commits"):
            return GroupTopicState()
        if self.tables.reads_without_spark("offset_commits"):
            return GroupTopicState.of(group, topic, self.tables.ordered_rows("offset_commits"))
        near = (F.col("group") == group) | (F.col("topic") == topic)  # a superset of ``state_row``
        frame = self.tables.ordered("offset_commits")
        extra = ("leader_epoch",) if "leader_epoch" in frame.columns else ()  # a table of an earlier release lacks it
        return GroupTopicState.of(group, topic, reduced_commits(frame.where(near), *extra))

    def reset(self, group: str, topic: str, positions: dict[int, int], member_id: str = "lakelog-admin") -> None:
        """Move positions by hand (one commit of ``reset`` rows; the caller checked the group is empty)."""
        rows = [OffsetCommit(group=group, topic=topic, partition=p, offset=o, member_id=member_id,
                             kind=CommitKind.RESET.value).model_dump() for p, o in sorted(positions.items())]
        self.tables.append("offset_commits", rows)

    def delete(self, group: str, member_id: str = "lakelog-admin") -> None:
        """Mark the group deleted: its positions stop counting; history stays (the caller checked it is empty)."""
        row = OffsetCommit(group=group, topic="", partition=-1, offset=-1, member_id=member_id,
                           kind=CommitKind.DELETED.value).model_dump()
        self.tables.append("offset_commits", [row])

    def topic_deleted(self, topic: str, topic_version: int) -> None:
        """Record that ``topic`` was deleted (once per deletion, named by its DELETING record's
        version): every group's earlier positions on it stop counting."""
        row = OffsetCommit(group="", topic=topic, partition=-1, offset=topic_version, member_id=CONTROLLER,
                           kind=CommitKind.TOPIC_DELETED.value).model_dump()
        self.tables.append("offset_commits", [row])  # a resumed deletion may write it again: counted once

    def deleted(self) -> set[str]:
        """Groups whose latest row (in commit order) is a deletion: nothing happened since."""
        if not self.tables.exists("offset_commits"):
            return set()
        if self.tables.reads_without_spark("offset_commits"):
            latest = latest_rows("offset_commits", self.tables.ordered_rows("offset_commits"), "group")
            return {group for (group,), r in latest.items() if r["kind"] == CommitKind.DELETED.value}
        rows = (self.tables.ordered("offset_commits").groupBy("group")
                .agg(F.max_by("kind", F.struct("_order", *ORDER_TIEBREAK["offset_commits"])).alias("kind"))
                .where(F.col("kind") == CommitKind.DELETED.value).select("group").collect())
        return {r["group"] for r in rows}

    def interested_groups(self, topic: str) -> list[str]:
        """Groups that subscribed to ``topic`` (a member joined for it) or committed on it, and
        were not deleted since."""
        if self.tables.reads_without_spark("offset_commits") and self.tables.reads_without_spark("group_members"):
            found = {r["group"] for r in self.tables.ordered_rows("offset_commits")
                     if r["topic"] == topic and r["partition"] >= 0}
            found |= {r["group"] for r in self.tables.ordered_rows("group_members") if topic in (r["topics"] or [])}
            return sorted(found - self.deleted())
        commits = self.tables.read("offset_commits").where((F.col("topic") == topic) & (F.col("partition") >= 0))
        members = self.tables.read("group_members").where(F.array_contains("topics", topic))
        rows = commits.select("group").union(members.select("group")).distinct().collect()
        return sorted({r["group"] for r in rows} - self.deleted())

    def groups(self) -> list[str]:
        """Groups with a position (not counting rows before a deletion)."""
        return sorted({g for g, _, _ in self.tables.position_rows()})

    def describe(self, group: str) -> list[PartitionLag]:
        """Committed offset, log end and lag per partition of every topic the group consumed."""
        near = (F.col("group") == group) | (F.col("kind") == CommitKind.TOPIC_DELETED.value)
        topics = sorted({t for g, t, _ in self.tables.position_rows(where=near) if g == group})
        admin = TopicAdmin(self.spark, self.layout.root)
        return partition_lags(self.layout.root, group, {t: self.committed(group, t) for t in topics},
                              lambda topic: admin.log(topic).snapshot())
