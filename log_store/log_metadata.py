"""A topic log's metadata as the protocol needs it at append time, encoded in the log table's own
properties (read inside every append's transaction), and one consistent view of a log.

- ``lakelog.undeleted_partition_count``, ``lakelog.topic``, ``lakelog.topic.deleted``
- ``lakelog.partition.<p>.leader_epoch``, ``.mode``, ``.start_offset``, ``.end_offset``
- ``lakelog.partition.<p>.epoch_ends``: the log end at each rise of the partition's epoch
  (``epoch_raised``), which the gates' thresholds are read from
- ``lakelog.topic_version``: the control-plane record the metadata was last set from
- ``lakelog.replica.role``, ``lakelog.replica.epoch``: a replicated topic's copy (leader or follower)

Each partition's log end offset is a Delta application transaction version
(``log_store.names.log_end_app_id``), read with ``log_end``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from pydantic import BaseModel, ConfigDict

from log_store.errors import FencedLeaderEpochError, TableConfigError, TopicDeletedError
from log_store.names import cleaned_app_id, high_watermark_app_id, log_end_app_id, log_start_app_id
from log_store.timestamp_types import TimestampTypes
from log_store.txn_marks import last_stable_offset

COUNT_PROP = "lakelog.undeleted_partition_count"
TOPIC_PROP = "lakelog.topic"
DELETED_PROP = "lakelog.topic.deleted"  # the topic was deleted: the log is fenced (topics delete)
# The version of the topic's control-plane record the metadata was last set from (1: as created).
TOPIC_VERSION_PROP = "lakelog.topic_version"


class Mode(str, Enum):
    """Partition status modes (rule 6): who may write and read the partition."""

    READ_WRITE = "ReadWrite"
    READ_ONLY = "ReadOnly"
    NONE = "None"


class PartitionMetadata(BaseModel):
    """One partition's metadata as every append and read obeys it.

    ``start_offset`` is the first offset of this incarnation of the partition number (a number
    reused after retirement continues after the old log end); ``end_offset`` is the final log
    end, fixed when the partition was marked for deletion (no append can land after the mark).
    """

    model_config = ConfigDict(frozen=True)

    partition: int
    leader_epoch: int = 0
    mode: Mode = Mode.READ_WRITE
    start_offset: int = 0
    end_offset: int | None = None


class TopicLogMetadata(BaseModel):
    """What the controller sets on a topic's log table and every append checks."""

    model_config = ConfigDict(frozen=True)

    topic: str
    undeleted_partition_count: int
    partitions: dict[int, PartitionMetadata]
    deleted: bool = False  # set in one metadata commit by topics delete: fences every append and read

    def earliest_offsets(self) -> dict[int, int]:
        """First offset of each partition's current incarnation (see ``TopicLog.earliest_offsets``)."""
        return {p: pm.end_offset if pm.mode is Mode.NONE and pm.end_offset is not None else pm.start_offset
                for p, pm in self.partitions.items()}

    def check_not_deleted(self) -> None:
        if self.deleted:
            raise TopicDeletedError(
                f"topic '{self.topic}' was deleted: this log is fenced and holds no records; a topic created "
                "again with the name is a new topic (start a new producer or consumer for it)")

    @classmethod
    def initial(cls, topic: str, count: int) -> "TopicLogMetadata":
        return cls(
            topic=topic,
            undeleted_partition_count=count,
            partitions={p: PartitionMetadata(partition=p) for p in range(count)},
        )

    def to_properties(self) -> dict[str, str]:
        props = {TOPIC_PROP: self.topic, COUNT_PROP: str(self.undeleted_partition_count)}
        if self.deleted:
            props[DELETED_PROP] = "true"
        for p, meta in self.partitions.items():
            props[f"lakelog.partition.{p}.leader_epoch"] = str(meta.leader_epoch)
            props[f"lakelog.partition.{p}.mode"] = meta.mode.value
            if meta.start_offset:
                props[start_offset_prop(p)] = str(meta.start_offset)
            if meta.end_offset is not None:
                props[end_offset_prop(p)] = str(meta.end_offset)
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "TopicLogMetadata":
        fields: dict[int, dict] = {}
        props = {k: v for k, v in props.items() if v != ""}  # empty: a property dropped through delta-rs
        for key, value in props.items():
            parts = key.split(".")
            if len(parts) == 4 and key.startswith("lakelog.partition.") and parts[3] in _PARTITION_FIELDS:
                fields.setdefault(int(parts[2]), {"partition": int(parts[2])})[parts[3]] = value
        return cls(
            topic=props.get(TOPIC_PROP, ""),
            undeleted_partition_count=int(props.get(COUNT_PROP, "0")),
            partitions={p: PartitionMetadata(**f) for p, f in sorted(fields.items())},
            deleted=props.get(DELETED_PROP) == "true",
        )


_PARTITION_FIELDS = frozenset(PartitionMetadata.model_fields) - {"partition"}


def start_offset_prop(partition: int) -> str:
    return f"lakelog.partition.{partition}.start_offset"


def end_offset_prop(partition: int) -> str:
    return f"lakelog.partition.{partition}.end_offset"


def epoch_ends_prop(partition: int) -> str:
    return f"lakelog.partition.{partition}.epoch_ends"


EpochEnd = tuple[int, int, int]  # (epoch before a rise, epoch after it, the log end at the rise)


def epoch_ends_of(conf: Mapping[str, str], partitions: Iterable[int]) -> dict[int, tuple[EpochEnd, ...]]:
    """The epoch rises recorded in a log's properties (``epoch_raised``): the one place they are
    read. A property reads ``from-to:end`` entries, comma-separated, oldest first."""
    out = {}
    for p in partitions:
        text = conf.get(epoch_ends_prop(p))
        if text:
            out[p] = tuple(tuple(int(n) for n in entry.replace("-", ":", 1).split(":")) for entry in text.split(","))
    return out


def epoch_raised(conf: Mapping[str, str], wanted: TopicLogMetadata, known: Mapping[str, int]) -> dict[str, str]:
    """The properties a metadata commit setting ``wanted`` on a log with properties ``conf`` and
    application versions ``known`` adds, recording each partition whose epoch it raises: the
    epoch before, the epoch after and the log end. The commit must depend on those partitions'
    log ends (``log_end_app_id``): no record of the old epoch lands after it (it changes the
    metadata every append checks) nor, then, between its read and it. So the log end recorded
    is where the old epoch's records end for good: the gates' threshold, which no later key
    compaction, retention or delete-records moves (the largest offset of the epoch still in the
    log does move). A partition new to the log has nothing to record."""
    was = TopicLogMetadata.from_properties(dict(conf)).partitions
    out = {}
    for p, pm in wanted.partitions.items():
        old = was.get(p)
        if old is None or pm.leader_epoch <= old.leader_epoch:
            continue
        end = log_end(dict(known), p, old.start_offset)
        entry = f"{old.leader_epoch}-{pm.leader_epoch}:{end}"
        before = conf.get(epoch_ends_prop(p))
        out[epoch_ends_prop(p)] = f"{before},{entry}" if before else entry
    return out


LAYOUT_PROP = "lakelog.layout"  # how the log's files are laid out (docs/design.md); absent: partitioned
PARTITIONED = "partitioned"  # a Delta partition (folder) per log partition
ARRIVAL = "arrival"  # a file per write task holding every partition it got, compacted into files per partition
LAYOUTS = (PARTITIONED, ARRIVAL)


def layout_of(properties: Mapping[str, str]) -> str:
    """The layout a log's table properties record."""
    return properties.get(LAYOUT_PROP, PARTITIONED)


# A replicated topic's copy at one root (docs/replication.md): which role the root's log plays, the
# latest leader epoch it was told of (its fence: requests stamped with an older one are refused),
# and the leader epoch whose history it holds (a leader's own; a follower's: that of the leader it
# last copied from; absent on a log written before it was kept apart: the fence epoch). Absent on
# an unreplicated topic's log, which is never fenced by them.
REPLICA_ROLE_PROP = "lakelog.replica.role"
REPLICA_EPOCH_PROP = "lakelog.replica.epoch"
REPLICA_DATA_EPOCH_PROP = "lakelog.replica.dataEpoch"
LEADER = "leader"
FOLLOWER = "follower"
# A replicated topic's id, the same in every root's log (each log's Delta table id differs): what
# a stream's position names, so a failover is not taken for a topic created again.
TOPIC_ID_PROP = "lakelog.topic_id"


def topic_id_of(properties: Mapping[str, str], table_id: str) -> str:
    """The topic id a log's properties record, else its Delta table id (an unreplicated log's)."""
    return properties.get(TOPIC_ID_PROP) or table_id


def check_leader(properties: Mapping[str, str], path: str) -> None:
    """Refuse a write to a replica root's log that does not lead (FencedLeaderEpochError). Read in
    the append's own transaction: the election's fence is a metadata commit, which conflicts with
    every append in flight, so no record lands at the fenced root after it."""
    if properties.get(REPLICA_ROLE_PROP, LEADER) != LEADER:
        raise FencedLeaderEpochError(
            f"the log at {path} is a follower (leader epoch {properties.get(REPLICA_EPOCH_PROP, '?')}): another root "
            "leads the topic now; nothing was written. Refresh the topic's metadata and produce to its leader")


class LogSnapshot(BaseModel):
    """One consistent view of a log: its Delta version, metadata and every partition's log end.

    Consumers plan a batch on a snapshot and read it at the same version, so a retirement's
    purge committed meanwhile can never make a read come back short.
    """

    model_config = ConfigDict(frozen=True)

    version: int
    topic_version: int
    metadata: TopicLogMetadata
    log_ends: dict[int, int]
    # Log start offsets raised by retention or delete-records (absent: the incarnation's start).
    log_starts: dict[int, int] = {}
    # Key compaction's cleaned offsets (absent: never cleaned): below one, offsets have gaps.
    cleaned: dict[int, int] = {}
    layout: str = PARTITIONED
    timestamp_types: TimestampTypes = TimestampTypes()  # what each record's timestamp is (message.timestamp.type)
    # A replicated log's kept high watermark and the leader epoch it was kept under (``kept_high_watermark``).
    kept_high_watermark: dict[int, int] = {}
    kept_epoch: int = -1
    # Each partition's transactional producers' marks (``txn_marks``; producer id -> mark), from
    # the snapshot's application versions; None where the snapshot did not read them (``stable_end``).
    txn_marks: dict[int, dict[str, int]] | None = None
    # Each partition's recorded epoch rises (``epoch_ends_of``).
    epoch_ends: dict[int, tuple[EpochEnd, ...]] = {}

    def readable(self) -> list[int]:
        """Partitions consumers read: undeleted and marked ones, not retired ones."""
        return [p for p, pm in self.metadata.partitions.items() if pm.mode is not Mode.NONE]

    def end_of_epoch(self, partition: int, epoch: int) -> int | None:
        """The log end of ``partition`` when its epoch rose past ``epoch`` (every record at an
        epoch up to it lies below; ``epoch_raised``); None if it has not risen past it, or the
        rise was not recorded (made by an earlier release, or without the controller)."""
        return next((end for low, high, end in self.epoch_ends.get(partition, ()) if low <= epoch < high), None)

    def first_offset(self, partition: int) -> int:
        """The first offset of ``partition`` a consumer can read: its incarnation's start, or the
        log start offset if retention or delete-records raised it above that."""
        return max(self.metadata.partitions[partition].start_offset, self.log_starts.get(partition, 0))

    def dense_from(self, partition: int) -> int:
        """Where ``partition``'s offsets are dense again: from its first readable offset, or from
        its cleaned offset once key compaction removed superseded records below that (gaps there are
        compaction's, not lost records)."""
        return max(self.first_offset(partition), self.cleaned.get(partition, 0))

    def stable_end(self, partition: int) -> int:
        """Where a read_committed reader stops in ``partition``: Kafka's last stable offset, from
        the marks (``txn_marks.last_stable_offset``, no row scanned), at most the log end (as
        capped: a replicated log's high watermark), and never below the incarnation's start (a
        transaction left open in a retired incarnation holds back no later one's reader past it)."""
        if self.txn_marks is None:
            raise ValueError("this log snapshot was read without its transaction marks; read it with its log ends")
        end = self.log_ends[partition]
        stable = last_stable_offset(self.txn_marks.get(partition, {}), end)
        return min(end, max(stable, self.metadata.partitions[partition].start_offset))

    def removed_prefix(self, partition: int) -> tuple[int, int] | None:
        """[start, log start) of the partition's current incarnation, deleted by retention or
        delete-records; None if nothing was."""
        pm = self.metadata.partitions.get(partition)
        if pm is None or pm.mode is Mode.NONE:
            return None
        first = self.first_offset(partition)
        return (pm.start_offset, first) if first > pm.start_offset else None

    def earliest_offsets(self) -> dict[int, int]:
        """Kafka's log start offsets: ``TopicLogMetadata.earliest_offsets`` raised to ``log_starts``."""
        return {p: max(o, self.log_starts.get(p, 0)) for p, o in self.metadata.earliest_offsets().items()}

    def below_incarnations(self, positions: dict[int, int]) -> dict[int, int]:
        """The positions below the first offset they can read (``first_offset``): the number was
        retired and grown back while a consumer held a position in the retired one, or retention
        or delete-records removed the records there."""
        parts = self.metadata.partitions
        return {p: o for p, o in positions.items() if p in parts and o < self.first_offset(p)}

    def incarnation_starts(self, partitions: Iterable[int]) -> dict[int, int]:
        """Where positions ``below_incarnations`` move to."""
        return {p: self.first_offset(p) for p in partitions}


def log_end(known: dict[str, int], partition: int, start: int) -> int:
    """A partition's log end from a snapshot's application versions (``known``): the one place it
    is read. Never below the start of the partition's current incarnation."""
    return max(known.get(log_end_app_id(partition), start), start)


def log_starts(known: dict[str, int], partitions: Iterable[int]) -> dict[int, int]:
    """The log start offsets recorded in a snapshot's application versions (``known``): the one
    place they are read. Partitions whose log start was never raised are absent."""
    return {p: known[log_start_app_id(p)] for p in partitions if log_start_app_id(p) in known}


def cleaned_offsets(known: dict[str, int], partitions: Iterable[int]) -> dict[int, int]:
    """Key compaction's cleaned offsets in a snapshot's application versions (``known``): the one
    place they are read. Partitions never cleaned are absent."""
    return {p: known[cleaned_app_id(p)] for p in partitions if cleaned_app_id(p) in known}


def kept_high_watermark(known: dict[str, int], partitions: Iterable[int]) -> dict:
    """A replicated log's kept high watermark in a snapshot's application versions (``known``):
    ``LogSnapshot``'s fields ``kept_high_watermark`` (per partition) and ``kept_epoch`` (the leader
    epoch it was kept under; -1: none kept). The one place it is read; written by
    ``control_plane.replication.watermarks``."""
    epoch = known.get(high_watermark_app_id(None), -1)
    marks = {p: known[high_watermark_app_id(p)] for p in partitions if high_watermark_app_id(p) in known}
    return {"kept_high_watermark": marks if epoch >= 0 else {}, "kept_epoch": epoch}


RETENTION_PROP = "delta.setTransactionRetentionDuration"


def check_set_transactions_kept(conf: dict[str, str], path: str) -> None:
    """Fail closed if the table lets Delta expire set transactions (log ends, producer marks, sink
    positions): an expired log end would make the next append reuse offsets."""
    if RETENTION_PROP in conf:
        raise TableConfigError(
            f"the Delta table at {path} sets {RETENTION_PROP}={conf[RETENTION_PROP]}, which expires the set "
            "transactions lakelog keeps its log end offsets, producer sequences and sink positions in; nothing was "
            f"written. Remove it: ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{RETENTION_PROP}')"
        )


