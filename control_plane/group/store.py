"""The group tables of one root: member state rows and heartbeat ticks, generations with their
compare-and-set, and the reads a member needs of topics (partition lists, retirements,
hand-overs). Reads are cached per table version (a cheap listing), so a member polling a quiet
group runs no Spark job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyspark.sql import SparkSession

from control_plane.group.offsets import GroupOffsets, PartitionLag
from control_plane.layout import RootLayout
from control_plane.records import CommitKind, ExpiredRange, GenerationRecord, MemberHeartbeat, TopicPartition
from control_plane.tables import ControlTables, member_states_of
from control_plane.topics import TopicAdmin
from log_store.engine import app_version_changes, table_version
from log_store import commits
from log_store.names import commit_metadata, generation_property, heartbeat_app_id, heartbeat_member
from log_store.errors import ConcurrentCommitError, LeaderNotAvailableError, StorageError
from log_store.log_metadata import LogSnapshot, Mode
from log_store.topic_log import TopicLog

# A heartbeat tick sets the application version ``log_store.names.heartbeat_app_id(group, member)``;
# ticks are read by this prefix, which the earlier releases' dotted form shares.
HEARTBEAT_PREFIX = "lakelog.heartbeat"
TICK_WINDOW = 2000  # heartbeat commits read back at first: an older tick's member was long judged


def ticks_of(changes: dict[str, tuple[int, int | None]], group: str) -> dict[str, tuple[int, int | None]]:
    """``group``'s members' ticks among application-version changes of the heartbeat table."""
    out = {}
    for app_id, v in changes.items():
        member = heartbeat_member(app_id, group)
        if member is not None:
            out[member] = v
    return out


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
        self._last_snaps: dict[tuple[str, bool], LogSnapshot] = {}  # (topic, ends) -> the last read

    def _cached(self, table: str, key: tuple, load: Callable[[], object], at_version: bool = False) -> object:
        """``load()`` (``load(version)`` with ``at_version``), once per version of ``table``."""
        version = table_version(self.spark, self.tables.path(table))
        hit = self._cache.get((table, *key))
        if hit and hit[0] == version:
            return hit[1]
        value = load(version) if at_version else load()
        self._cache[(table, *key)] = (version, value)
        return value

    def heartbeat(self, beat: MemberHeartbeat) -> None:
        """A member's state changed: append its full heartbeat row."""
        self.tables.append("group_members", [beat.model_dump()])

    def tick(self, group: str, member_id: str, beat: int) -> None:
        """A member is alive: one commit setting its heartbeat counter to ``beat``, no data written."""
        self.tables.ensure()
        txn = commits.start(self.spark, self.tables.path("group_heartbeats"), "the group heartbeats table")
        txn.commit({}, counters={heartbeat_app_id(group, member_id): beat})

    def tick_members(self, group: str, beats: dict[str, int]) -> None:
        """Several members are alive: one commit setting each one's heartbeat counter (a group
        coordinator's ticks for its members, ``lakelog serve``)."""
        if not beats:
            return
        self.tables.ensure()
        txn = commits.start(self.spark, self.tables.path("group_heartbeats"), "the group heartbeats table")
        txn.commit({}, counters={heartbeat_app_id(group, m): beat for m, beat in beats.items()})

    def ticks(self, group: str) -> dict[str, tuple[int, int | None]]:
        """Latest heartbeat counter of each member, with the writer's epoch ms (for display only),
        read from new commits only."""
        path = self.tables.path("group_heartbeats")
        version = table_version(self.spark, path)
        if version < 0:
            return {}
        since = self._ticks_version if self._ticks_version is not None else max(version - TICK_WINDOW, -1)
        if version > since:
            self._ticks.update(app_version_changes(self.spark, path, since, HEARTBEAT_PREFIX))
            self._ticks_version = version
        return ticks_of(self._ticks, group)

    def member_states(self, group: str) -> dict[str, MemberHeartbeat]:
        """Each member's latest state row, latest in commit order (never by the writers' clocks)."""
        def load(version: int) -> dict[str, MemberHeartbeat]:
            return member_states_of(self.tables.ordered_rows("group_members", version), group)

        return self._cached("group_members", (group,), load, at_version=True)

    def generation(self, group: str) -> GenerationRecord | None:
        gens = self.generations(group)
        return gens[-1] if gens else None

    def generations(self, group: str) -> list[GenerationRecord]:
        def load(version: int) -> list[GenerationRecord]:
            rows = [r for r in self.tables.rows_at("group_generations", version) if r["group"] == group]
            return [GenerationRecord.model_validate(r) for r in sorted(rows, key=lambda r: r["generation"])]

        return self._cached("group_generations", (group,), load, at_version=True)

    def view_start(self, group: str, topic: str) -> int | None:
        """The topic's version at the first generation of ``group`` that planned with the topic's
        current incarnation (``TopicImage.view_start``): what a retirement took before it was
        never the group's to deliver; what it took since, the group delivers or reports expired.
        None if no generation of the group saw this incarnation."""
        planned = [g.topic_versions[topic] for g in self.generations(group) if topic in g.topic_versions]
        return self.topics.image(topic).view_start(planned) if planned else None

    # -- what groups list/describe read (control_plane.group.describe.GroupReads) ----------------
    def deleted_groups(self) -> set[str]:
        return self.offsets.deleted()

    def group_names(self) -> set[str]:
        """Groups with a position or a generation (deleted ones too)."""
        names = set(self.offsets.groups())
        names.update(r["group"] for r in self.tables.read("group_generations").select("group").distinct().collect())
        return names

    def lags(self, group: str) -> list[PartitionLag]:
        return self.offsets.describe(group)

    def expired_ranges(self, group: str) -> list[ExpiredRange]:
        return self.offsets.expired_ranges(group)

    def propose(self, record: GenerationRecord) -> bool:
        """Write a generation if nobody wrote that number first (one leader per generation).

        The compare-and-set is the count ``lakelog.generation.<group>`` (``ControlTables.counted``),
        read and raised in the same commit as the row: any concurrent proposal for the group conflicts.
        """
        self.tables.ensure()
        metadata = commit_metadata("generation", group=record.group, generation=record.generation)
        try:
            return self.tables.insert_versioned("group_generations", generation_property(record.group),
                                                record.generation, record.model_dump(), metadata)
        except ConcurrentCommitError:
            return False  # others keep proposing: this member leads another time

    def snapshots(self, topics: Iterable[str], ends: bool = False) -> dict[str, LogSnapshot]:
        """Each existing subscribed topic's log snapshot (metadata and topic version; with ``ends``,
        log ends and log starts too)."""
        current = self._cached("topics", (), self.topics.current)
        out = {}
        for t in sorted(set(topics)):
            if t not in current:
                continue
            try:
                out[t] = TopicLog(self.spark, current[t].location).snapshot(ends=ends)
            except StorageError as exc:  # a replicated topic's leader root lost: the last view holds
                if (t, ends) not in self._last_snaps:  # until it is back or another root is elected
                    raise LeaderNotAvailableError(f"the log of '{t}' cannot be read ({exc}); waiting for its root "
                                                  "or an election") from exc
                out[t] = self._last_snaps[(t, ends)]
            self._last_snaps[(t, ends)] = out[t]
        return out

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
        return self.topics.image(topic).retired_between(after, upto)

    def revocations(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[tuple[str, int], ...]]:
        """Who committed a revocation of each of ``partitions``, and under which generation: a
        hand-over is done once its previous owner revoked the partition (``GroupImage.released``)."""
        wanted = set(partitions)
        if not wanted:
            return {}
        out: dict[TopicPartition, list[tuple[str, int]]] = {}
        for r in self._cached("offset_commits", (), lambda v: self.tables.ordered_rows("offset_commits", v), at_version=True):
            if r["group"] == group and r["kind"] == CommitKind.REVOKE.value:
                tp = TopicPartition(topic=r["topic"], partition=r["partition"])
                if tp in wanted:
                    out.setdefault(tp, []).append((r["member_id"], r["generation"]))
        return {tp: tuple(v) for tp, v in out.items()}
