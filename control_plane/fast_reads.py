"""``topics list/describe`` and ``groups list/describe`` without starting Spark (delta-rs reads
the tables).

The answers are built by the same code as the Spark readers' (``TopicImage`` over the records,
``describe_topic`` over a log snapshot, ``describe_group`` over ``GroupReads``); only the reader
differs. Commit order comes from the rows' ``commit_order`` labels, as for Spark (on a root made
before them, from the change feed: ``rs_reader.rows_in_commit_order``).
``tests/control_plane/test_fast_reads.py`` checks that both readers agree.
"""

from __future__ import annotations

from control_plane.group.offsets import PartitionLag, partition_lags
from control_plane.group.store import HEARTBEAT_PREFIX, TICK_WINDOW, ticks_of
from control_plane.image import TopicImage
from control_plane.layout import RootLayout
from control_plane.records import (
    CommitKind, ExpiredRange, GenerationRecord, MemberHeartbeat, ReplicaState, TopicEvent, TopicRecord,
)
from control_plane.replication.state import TABLE as REPLICAS, latest_states, located, states_of
from control_plane.tables import latest_position_rows, latest_rows, member_states_of
from control_plane.topics import TopicDescription, describe_topic, live_record
from log_store import rs_reader
from log_store.log_metadata import LogSnapshot


class FastTopicReader:
    """Read-only topic views of one root, JVM-free. ``storage``: delta-rs storage options for a
    root in an object store (``rs_reader``)."""

    def __init__(self, root: str, storage: rs_reader.Storage = None) -> None:
        self.layout = RootLayout(root)
        self.storage = storage

    def images(self) -> dict[str, TopicImage]:
        records: dict[str, list[TopicRecord]] = {}
        for row in rs_reader.rows(self.layout.control("topics"), storage=self.storage):
            record = TopicRecord.model_validate(row)
            records.setdefault(record.topic, []).append(record)
        return {t: TopicImage(t, rs) for t, rs in records.items()}

    def replica_states(self) -> dict[tuple[str, int], ReplicaState]:
        """Each replicated topic's latest replica state (none on a root without replicated topics)."""
        path = self.layout.control(REPLICAS)
        if not rs_reader.exists(path, self.storage):
            return {}
        return latest_states(states_of(rs_reader.rows(path, storage=self.storage)))

    def latest(self, topic: str, images: dict[str, TopicImage] | None = None,
               states: dict[tuple[str, int], ReplicaState] | None = None) -> TopicRecord:
        """``topic``'s latest record if it is live (else the error that says why not), located at
        the log its replica state names leader (``replication.state.located``)."""
        image = (images if images is not None else self.images()).get(topic)
        record = live_record(image.latest if image else None, topic, self.layout.root)
        states = self.replica_states() if states is None else states
        return located(record, image.records[0].topic_version, states)

    def list(self) -> list[TopicRecord]:
        """As ``TopicAdmin.list``: live topics and those being deleted."""
        latest = [img.latest for img in self.images().values()]
        return sorted((r for r in latest if r.event is not TopicEvent.DELETED), key=lambda r: r.topic)

    def describe(self, topic: str) -> TopicDescription:
        record, (snap, topic_id) = self._log_snapshot(topic)
        return describe_topic(record, snap, topic_id, rs_reader.rows(self.layout.control("topic_configs"), storage=self.storage))

    def log_snapshot(self, topic: str) -> LogSnapshot:
        return self._log_snapshot(topic)[1][0]

    def _log_snapshot(self, topic: str) -> tuple[TopicRecord, tuple[LogSnapshot, str]]:
        record = self.latest(topic)
        return record, rs_reader.log_snapshot(record.location, storage=self.storage)


class FastGroupReader:
    """``GroupReads`` of one root, JVM-free (``storage`` as ``FastTopicReader``'s). Each read of a table is done once per command.

    Raises ``rs_reader.FastReadUnavailable`` when the change feed cannot give commit order (old
    commit files cleaned up): the command then reads with Spark.
    """

    def __init__(self, root: str, storage: rs_reader.Storage = None) -> None:
        self.layout = RootLayout(root)
        self.storage = storage
        self.topics = FastTopicReader(root, storage)
        self._rows: dict[str, list[dict]] = {}
        self._ticks: dict[str, tuple[int, int | None]] | None = None

    def _table(self, name: str, ordered: bool = True) -> list[dict]:
        if name not in self._rows:
            path = self.layout.control(name)
            self._rows[name] = (rs_reader.rows_in_commit_order(path, storage=self.storage) if ordered
                                else rs_reader.rows(path, storage=self.storage))
        return self._rows[name]

    def _positions(self) -> dict[tuple[str, str, int], dict]:
        return latest_position_rows(self._table("offset_commits"))

    def deleted_groups(self) -> set[str]:
        """Groups whose latest row (in commit order) is a deletion, as ``GroupOffsets.deleted``."""
        latest = latest_rows("offset_commits", self._table("offset_commits"), "group")
        return {g for (g,), r in latest.items() if r["kind"] == CommitKind.DELETED.value}

    def group_names(self) -> set[str]:
        return {g for g, _t, _p in self._positions()} | {r["group"] for r in self._table("group_generations", False)}

    def generations(self, group: str) -> list[GenerationRecord]:
        rows = [r for r in self._table("group_generations", False) if r["group"] == group]
        return [GenerationRecord.model_validate(r) for r in sorted(rows, key=lambda r: r["generation"])]

    def lags(self, group: str) -> list[PartitionLag]:
        """As ``GroupOffsets.describe``: committed offset, log end and lag per partition."""
        committed: dict[str, dict[int, int]] = {}
        for (g, topic, p), r in self._positions().items():
            if g == group:
                committed.setdefault(topic, {})[p] = int(r["offset"])
        return partition_lags(self.layout.root, group, committed,
                              self.topics.log_snapshot)

    def member_states(self, group: str) -> dict[str, MemberHeartbeat]:
        """Each member's latest state row in commit order, as ``GroupTables.member_states``."""
        return member_states_of(self._table("group_members"), group)

    def ticks(self, group: str) -> dict[str, tuple[int, int | None]]:
        if self._ticks is None:  # read once: `groups list` asks for every group's
            path = self.layout.control("group_heartbeats")
            version = rs_reader.version(path, self.storage)
            self._ticks = {} if version < 0 else rs_reader.app_version_changes(
                path, max(version - TICK_WINDOW, -1), HEARTBEAT_PREFIX, self.storage)
        return ticks_of(self._ticks, group)

    def expired_ranges(self, group: str) -> list[ExpiredRange]:
        rows = [r for r in self._table("offset_commits") if r["group"] == group and r["kind"] == CommitKind.EXPIRED.value]
        return sorted((ExpiredRange(topic=r["topic"], partition=r["partition"], first=r["offset"], end=r["end_offset"])
                       for r in rows), key=lambda r: (r.topic, r.partition, r.first))
