"""Planning a ``format("lakelog")`` read (``pipelines.spark.source``) on the driver side: which
topics and partitions a read covers, where it starts, and where each micro-batch of a stream
ends under the resize gates. Reads the root with delta-rs only: it runs in a Python worker that
has no Spark session (a session is attached only to commit a group's positions).

A root may be local or in an object store delta-rs reads (``rs_reader.SCHEMES``). The read's
``storage.*`` options travel in the planner and in every task's ``RangePartition``, so the
driver's plans and the executors' reads open the store alike.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import InputPartition

from control_plane.fast_reads import FastTopicReader
from control_plane.group.offsets import unreported_expiry
from control_plane.image import TopicImage
from control_plane.records import ExpiredRange, TopicRecord
from control_plane.topics import live_record
from log_store import rs_reader
from log_store.errors import InvalidConfigurationError, LakelogError
from log_store.files import is_remote, local_path
from log_store.object_store import is_s3
from log_store.log_metadata import LogSnapshot
from pipelines.gating import OffsetGate, plan_ranges
from pipelines.spark.options import ROOT, OffsetSpec, SourceOptions, TimestampSpec
from pipelines.spark.positions import bounds_to_read, resolve_topics, starting_positions, timestamp_targets

_log = logging.getLogger("lakelog.spark")
UNLIMITED = 2**62
TASK_RECORDS = 200_000  # about this many records per Spark task of a read

Positions = dict[int, int]


class DataLossError(LakelogError):
    """Records a read was to deliver are gone (a partition retired before it read them)."""


def resolve_root(given: str | None, default: str | None, writing: bool = False) -> str:
    """The root a read or write uses: the ``root`` option, else the one registered as default.
    A local path is made absolute here, on the driver: Spark's workers may run elsewhere. A URI
    must name an object store delta-rs reads: both sides of a read open the root with it. Writes
    take local and S3 roots: their tasks stage rows with pyarrow, which lakelog points at S3
    (``log_store.object_store``), and the driver commits them through Spark's S3A."""
    root = given or default
    if not root:
        raise InvalidConfigurationError(
            f"no lakelog root: give .option('{ROOT}', PATH_OR_URI), or register the source with a default "
            "root (pipelines.spark.source.register(spark, root))")
    if not is_remote(root):
        return str(local_path(root))
    if writing and not is_s3(root):
        raise InvalidConfigurationError(
            f"root {root!r}: format('lakelog') writes to local and S3 roots (s3://, s3a://): its tasks stage rows "
            "with pyarrow, which lakelog points only at those; produce with pipelines.producer.Producer in a "
            "Spark session configured for the store")
    scheme = root.split(":", 1)[0].lower()
    if scheme == "dbfs":
        raise InvalidConfigurationError(
            f"root {root!r}: format('lakelog') reads with delta-rs, which cannot open Databricks' dbfs:/ paths; "
            "give the object store URI the path is mounted from (s3://, abfss://, gs://) or the local "
            "/dbfs/... path of the same folder")
    if scheme not in rs_reader.SCHEMES:
        raise InvalidConfigurationError(
            f"root {root!r}: format('lakelog') reads with delta-rs, which does not open {scheme}:// here; "
            f"give a local path or a URI with one of {', '.join(s + '://' for s in rs_reader.SCHEMES)}")
    return root.rstrip("/")


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


# -- planning (driver side) -----------------------------------------------------------------------
class Planner:
    """What a read covers, and where each batch of a stream ends. Reads the root with delta-rs."""

    def __init__(self, root: str, opts: SourceOptions, gateway: str | None = None,
                 storage: rs_reader.Storage = None) -> None:
        """``storage``: delta-rs storage options for a remote root (the read's ``storage.*``
        options over what the session's S3A settings say, ``LakelogDataSource.storage_for``)."""
        self.root, self.opts, self.gateway = root, opts, gateway
        self.storage = dict(storage) if storage else (opts.storage or None)
        self.reader = FastTopicReader(root, self.storage)
        self._gates: dict[str, tuple[OffsetGate, _OwnPositions]] = {}
        self.skipped: dict[tuple[str, int, int], ExpiredRange] = {}  # lost records a group has yet to report
        self._published: dict | None = None  # the positions last committed to the group
        self._locations: dict[str, str] = {}

    def topics(self) -> dict[str, tuple[TopicImage, LogSnapshot]]:
        """Each topic the read covers now: its image and its log's snapshot."""
        images = self.reader.images()
        live = [t for t, img in images.items() if img.latest and img.latest.event.value not in ("deleting", "deleted")]
        out = {}
        for topic in resolve_topics(self.opts, live):
            self._locations[topic] = self._log_location(live_record(images[topic].latest, topic, self.root))
            out[topic] = (images[topic], rs_reader.log_snapshot(self._locations[topic], storage=self.storage)[0])
        return out

    def location(self, topic: str) -> str:
        """Where ``topic``'s log is (as the last ``topics()`` read it: a topic deleted and created
        again gets a new log, which the next plan reads)."""
        if topic not in self._locations:
            self._locations[topic] = self._log_location(
                live_record(self.reader.images().get(topic, TopicImage(topic, [])).latest, topic, self.root))
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

    def bounds(self, topics: dict[str, tuple[TopicImage, LogSnapshot]]) -> dict[str, dict[int, tuple[int, int]]]:
        """(earliest, latest) of every partition the read covers (``assign``: each must exist)."""
        every = {t: {p: (snap.first_offset(p), snap.log_ends[p]) for p in snap.readable()}
                 for t, (_img, snap) in topics.items()}
        return bounds_to_read(self.opts, every)

    def starting(self, topics: dict[str, tuple[TopicImage, LogSnapshot]]) -> dict[str, Positions]:
        """Where the read starts on every covered partition (``startingOffsets`` or a timestamp)."""
        bounds = self.bounds(topics)
        spec = self.opts.starting
        if isinstance(spec, OffsetSpec):
            return starting_positions(spec, bounds)
        targets = timestamp_targets(spec, {t: list(ps) for t, ps in bounds.items()})
        out: dict[str, Positions] = {}
        for topic, per_partition in targets.items():
            snap = topics[topic][1]
            location = self.location(topic)
            out[topic] = {}
            for p, ts in per_partition.items():
                lo, hi = bounds[topic][p]
                found = (rs_reader.first_offset_at(location, snap.version, p, lo, ts, storage=self.storage)
                         if hi > lo else None)
                if found is None:
                    raise InvalidConfigurationError(
                        f"{_timestamp_option(spec)}: topic '{topic}' partition {p} has no record at or after "
                        f"{ts} ms (its records end at offset {hi}); give an earlier time, or startingOffsets")
                out[topic][p] = found
        return out

    def check_loss(self, topic: str, image: TopicImage, snap: LogSnapshot, positions: Positions) -> list[ExpiredRange]:
        """Records below ``positions`` the read never delivered that are gone (a retired partition's,
        or removed by retention or delete-records): an error under ``failOnDataLoss`` (the default),
        else logged and skipped."""
        lost = unreported_expiry(topic, snap, positions, positions,
                                 lambda: image.retired_between(-1, snap.topic_version), lambda: set())
        if lost and self.opts.fail_on_data_loss:
            named = ", ".join(f"partition {r.partition} offsets {r.first}-{r.end - 1}" for r in lost)
            raise DataLossError(
                f"topic '{topic}': records retired or deleted (retention, delete-records) before this read "
                f"delivered them ({named}); "
                "restart from later offsets, or set failOnDataLoss to false to skip them with a warning")
        for r in lost:
            self.skipped[(topic, r.partition, r.end)] = r
            _log.warning("topic '%s' partition %s: offsets %s-%s were retired or deleted before this read delivered them "
                         "(failOnDataLoss=false: skipped)", topic, r.partition, r.first, r.end - 1)
        return lost

    def next_end(self, start: dict, limit: int, caps: dict[str, Positions] | None = None) -> dict:
        """Where the next micro-batch from ``start`` ends: at most ``limit`` records, shared over
        partitions, none the resize gates hold back, none past ``caps`` (Trigger.AvailableNow's
        ends). New partitions start at their first offset; retired ones are dropped."""
        positions_in = start.get("topics", {})
        out_topics: dict[str, dict[str, int]] = {}
        versions: dict[str, int] = {}
        remaining = limit
        for topic, (image, snap) in self.topics().items():
            covered = self.covered(topic, snap)
            had = {int(p): int(o) for p, o in positions_in.get(topic, {}).items()}
            self.check_loss(topic, image, snap, had)
            positions = {p: max(had.get(p, snap.first_offset(p)), snap.first_offset(p)) for p in covered}
            gate, own = self._gate(topic, image)
            own.delivered = dict(positions)
            own.unread = set(snap.readable()) - set(covered)
            cap = None if caps is None else caps.get(topic, {})  # a topic that appeared since the start: nothing
            ranges = plan_ranges(gate, _capped(snap, cap), positions, remaining) if remaining > 0 else {}
            remaining -= sum(e - s for s, e in ranges.values())
            ends = {**positions, **{p: e for p, (_s, e) in ranges.items()}}
            out_topics[topic] = {str(p): o for p, o in sorted(ends.items())}
            versions[topic] = snap.version
        return {"topics": out_topics, "versions": versions}

    def publish(self, offsets: dict) -> None:
        """With a ``group`` option: commit the stream's positions (``offsets``) to the group's
        tables, with the lost records it skipped, in one commit, so ``groups describe`` shows its
        lag and the controller counts the group before retiring a partition it has not read."""
        if not self.opts.group or (offsets.get("topics") == self._published and not self.skipped):
            return
        from control_plane.group.offsets import GroupOffsets
        from control_plane.records import TopicPartition
        from log_store.session import attach

        if not self.gateway:
            raise InvalidConfigurationError(
                "the group option needs a PySpark driver with a py4j gateway (not Spark Connect) to commit positions")
        positions = {TopicPartition(topic=t, partition=int(p)): int(o)
                     for t, ps in offsets.get("topics", {}).items() for p, o in ps.items()}
        expired = list(self.skipped.values())
        GroupOffsets(attach(self.gateway), self.root).commit_positions(
            self.opts.group, positions, member_id=f"stream:{self.opts.group}", expired=expired)
        self.skipped.clear()
        self._published = offsets.get("topics")

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

    def ranges(self, start: dict, end: dict) -> list["RangePartition"]:
        """The input partitions (Spark tasks) reading what lies between ``start`` and ``end``:
        each topic's partition ranges packed into ``tasks_for`` tasks, so a batch of a few
        records is one task and a large one is spread, whatever the partition count."""
        out = []
        for topic, ends in end.get("topics", {}).items():
            version = end["versions"][topic]
            location = self.location(topic)
            snap = rs_reader.log_snapshot(location, version, self.storage)[0]
            begun = start.get("topics", {}).get(topic, {})
            spans = []
            for p_text, stop in ends.items():
                p = int(p_text)
                first = snap.first_offset(p) if p in snap.metadata.partitions else stop
                s = max(int(begun.get(p_text, first)), first)
                if stop > s:
                    spans.append((p, s, stop))
            out += [RangePartition(topic, location, version, group, self.storage) for group in pack(spans)]
        return out


def pack(spans: list[tuple[int, int, int]], task_records: int = TASK_RECORDS) -> list[list[tuple[int, int, int]]]:
    """Partition ranges (partition, start, end) packed into about one task per ``task_records``
    records (at least one, at most one per range), the largest first into the emptiest task."""
    if not spans:
        return []
    total = sum(e - s for _p, s, e in spans)
    tasks: list[list[tuple[int, int, int]]] = [[] for _ in range(min(len(spans), total // task_records + 1))]
    loads = [0] * len(tasks)
    for span in sorted(spans, key=lambda x: x[1] - x[2]):
        i = loads.index(min(loads))
        tasks[i].append(span)
        loads[i] += span[2] - span[1]
    return [sorted(t) for t in tasks]


def _capped(snap: LogSnapshot, caps: Positions | None) -> LogSnapshot:
    """``snap`` with its log ends lowered to ``caps`` (partitions absent from ``caps``: nothing)."""
    if caps is None:
        return snap
    return snap.model_copy(update={"log_ends": {p: min(e, caps.get(p, 0)) for p, e in snap.log_ends.items()}})


def _timestamp_option(spec: TimestampSpec) -> str:
    return "startingTimestamp" if spec.timestamp is not None else "startingOffsetsByTimestamp"


class RangePartition(InputPartition):
    """One task's reading: records [start, end) of some partitions of one topic, at one log version.
    ``storage``: the read's delta-rs storage options, which the executor needs to open the log
    (they are not part of the partition's value, which Spark may show)."""

    def __init__(self, topic: str, location: str, version: int, spans: list[tuple[int, int, int]],
                 storage: rs_reader.Storage = None) -> None:
        super().__init__((topic, spans))
        self.topic, self.location, self.version, self.spans = topic, location, version, spans
        self.storage = storage
