"""The topic controller: grows and shrinks topics, retires marked partitions (rules 4-7) and
deletes topics (``deletion``).

Where things are: ``rules`` decides (pure: expand, shrink, retire, drained, due), ``apply``
records a change (compare-and-set) and applies it to the log, ``retirement`` reads who drained
a marked partition and purges retired rows. This module runs the steps in order, with the crash
points the fault campaign kills them at.

Two tables take part in every step. The ``topics`` control table holds the intent and the
history: each change is the next ``TopicRecord`` version, inserted with a compare-and-set on
``(topic, topic_version)``, so of two racing controllers one wins. The log table's properties
are the commit point every producer and consumer obeys: the controller applies the latest record
to them in one conditional metadata commit (all epochs, the count and the modes at once). Every
command first finishes what the latest record asks for (``resume``), so a controller killed
anywhere is completed by re-running any command, and a recorded change is applied exactly once:
no epoch is bumped twice.

Partition numbers. The partitioner sends keys to ``0..undeleted_partition_count-1``, so the
undeleted partitions are always exactly those numbers and a grown topic's new partitions are
numbered from the current count up (the source's "partitions without a znode"). A number whose
partition was retired is reused: its epoch continues from the retired one (``leader_epoch`` never
decreases along offsets) and its offsets continue after the old log end. A number whose partition
is still marked (ReadOnly) blocks growth over it until it is retired: reviving it would lift the
upper-offset gate (rule 9) that orders its remaining records before the same keys' newer ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel
from pyspark.sql import SparkSession

from control_plane.controller.apply import ATTEMPTS, TopicChanges
from control_plane.controller.deletion import delete_topic, finish_deletion
from control_plane.controller.retention import ConfigChange, LogMaintenance
from control_plane.controller.retirement import drained_partitions, purge, report_unread
from control_plane.controller.rules import check_count, due, essence, log_metadata, plan_alter, plan_retire
from control_plane.layout import RootLayout
from control_plane.tables import ControlTables
from control_plane.topic_config import parse_pairs, policies
from control_plane.records import TopicEvent, TopicRecord, utcnow
from control_plane.topics import TopicAdmin
from control_plane.settings import ControllerSettings
from log_store.crash import crash_point
from log_store.errors import LOST_ROOT, ConcurrentTopicChangeError, InvalidConfigurationError, ReplicationError
from log_store.key_compaction import KeyCompaction
from log_store.key_order import Barrier
from log_store.file_compaction import Compaction
from log_store.log_files import LogStartChange
from log_store.rewrites import LayoutChange, change_layout
from log_store.log_metadata import PARTITIONED, Mode
from log_store.topic_log import TopicLog

__all__ = ["AlterResult", "TickResult", "TopicController", "essence", "log_metadata"]


class AlterResult(BaseModel):
    """What ``alter`` did. ``event`` is None when there was nothing to change."""

    topic: str
    previous_count: int
    undeleted_partition_count: int
    topic_version: int
    event: TopicEvent | None
    resumed: bool = False  # an interrupted earlier change was finished first
    note: str = ""


class TickResult(BaseModel):
    """What one ``tick`` did to one topic."""

    topic: str
    topic_version: int
    retired: list[int] = []  # marked partitions retired by this tick
    purged: list[int] = []  # retired partitions whose rows this tick deleted
    waiting: dict[int, float] = {}  # marked partitions still holding records: seconds of delay left
    expired_for: dict[str, int] = {}  # groups that never read a partition retired past the delay: records reported expired
    resumed: bool = False
    deleted: bool = False  # this tick finished an interrupted topic deletion
    log_starts: list[LogStartChange] = []  # log starts retention raised (records deleted in whole files)
    compacted: list[Compaction] = []  # partitions whose small files this tick merged
    cleaned: list[KeyCompaction] = []  # partitions key compaction cleaned (cleanup.policy=compact)
    error: str | None = None  # the topic's log could not be read (its root lost): skipped, the others ticked


class TopicController:
    """Grows, shrinks and retires the partitions of the topics under one root."""

    def __init__(self, spark: SparkSession, root: str, settings: ControllerSettings | None = None) -> None:
        self.spark = spark
        self.layout = RootLayout(root)
        self.admin = TopicAdmin(spark, root)
        self.changes = TopicChanges(spark, self.admin)
        self.settings = settings or ControllerSettings()
        self.logs = LogMaintenance(spark, ControlTables(spark, self.layout))

    # -- configuration, delete-records, compaction (controller.retention) -------------------------
    def alter_config(self, topic: str, pairs: list[str], delete: list[str] = (), replace: bool = False) -> ConfigChange:
        """Kafka's ``kafka-configs --alter`` for a topic: set ``key=value`` pairs, remove keys (with
        ``replace``, the pairs are the whole configuration: Kafka's legacy AlterConfigs). A
        replicated topic cannot be compacted by key: replication copies each record of the leader's
        log ends, and a follower would keep what the leader's cleaning removed."""
        if "compact" in policies(parse_pairs(list(pairs)).get("cleanup.policy", "delete")) \
                and self.admin.replica_state(topic) is not None:
            raise ReplicationError(f"'{topic}' is replicated, and replicated topics keep cleanup.policy=delete "
                                   "(a follower copies every record of its leader); nothing was changed")
        return self.logs.alter_config(self.resume(topic), list(pairs), list(delete), replace=replace)

    def delete_records(self, topic: str, offsets: dict[int, int]) -> list[LogStartChange]:
        """Kafka's ``kafka-delete-records``: no record of partition p below ``offsets[p]`` is read again.
        A replicated topic's raised log starts are copied to its in-sync roots before it returns (a
        clean election of one that lacks them would make the records readable again)."""
        state = self.admin.replica_state(topic)
        record = self.resume(topic)
        changes = self.logs.delete_records(record, offsets)
        if state is not None:  # even when nothing changed here: a run again copies what a failed one left
            from control_plane.replication.operations import Replication

            Replication(self.spark, self.layout.root).acknowledge_change(topic, record.location, state.leader_epoch,
                                                                         "delete-records")
        return changes

    def compact(self, topic: str, partitions: list[int] | None = None) -> list[Compaction]:
        """Merge small files of ``topic``'s partitions into files of its ``segment.bytes``."""
        record = self.resume(topic)
        return self.logs.compact(record, self.logs.config(record), partitions)

    def compact_keys(self, topic: str, partitions: list[int] | None = None,
                     now_ms: int | None = None) -> list[KeyCompaction]:
        """Kafka's log cleaning of ``topic`` (its ``cleanup.policy`` must have ``compact``): each
        due partition keeps its keys' latest records (``log_store.key_compaction``)."""
        record = self.resume(topic)
        config = self.logs.config(record)
        if not config.compacted:
            raise InvalidConfigurationError(
                f"'{topic}' has cleanup.policy={config.cleanup_policy}: key compaction is for topics with compact "
                f"(lakelog topics alter --topic {topic} --config cleanup.policy=compact); nothing was changed")
        self.logs.record_missing_cleanings(record)
        return self.logs.compact_keys(record, config, partitions, now_ms, self.barriers(topic))

    def barriers(self, topic: str) -> Callable[[int], list[Barrier]]:
        """``topic``'s resizes at a version of its history, read when asked: key compaction asks
        after its log snapshot, so the history reaches the version the log's metadata was set from."""
        def at(version: int) -> list[Barrier]:
            image = self.admin.image(topic)
            if image.version < version:
                raise ConcurrentTopicChangeError(
                    f"'{topic}''s log was set from topic version {version}, and its history ends at {image.version}: "
                    "the topics table is behind the log; nothing was changed. Run the command again")
            return image.at(version).barriers()
        return at

    def check_layout(self, topic: str, layout: str) -> None:
        """Refuse a layout ``topic`` cannot have before anything changes: replication copies the
        partitioned layout only (an arrival log at the leader would fail every copy, its followers
        would leave the in-sync set, and no clean election could follow)."""
        if layout != PARTITIONED and self.admin.replica_state(topic) is not None:
            raise ReplicationError(f"'{topic}' is replicated, and replicated topics keep the {PARTITIONED} layout "
                                   f"(replication copies a folder per partition); nothing was changed")

    def change_layout(self, topic: str, layout: str) -> LayoutChange:
        """Move ``topic``'s log to ``layout`` (``rewrites.change_layout``): one commit rewriting
        every file, no record changed; the same layout is a no-op."""
        self.check_layout(topic, layout)
        return change_layout(self.spark, self.resume(topic).location, layout)

    def alter(self, topic: str, partitions: int) -> AlterResult:
        """Move ``topic`` to ``partitions`` undeleted partitions: grow (rule 4) or, if enabled, shrink (rule 5).

        The same count is a no-op (after finishing any interrupted change), so re-running a
        killed ``alter`` is how it is completed.
        """
        check_count(topic, partitions)
        record, resumed = self._resume(topic)
        k = record.undeleted_partition_count
        result = AlterResult(topic=topic, previous_count=k, undeleted_partition_count=k,
                             topic_version=record.topic_version, event=None, resumed=resumed)
        target = plan_alter(record, partitions, self.settings.delete_partition_enable, utcnow())
        if target is None:
            return result.model_copy(update={"note": f"'{topic}' already has {k} undeleted partitions; nothing to change"})
        crash_point("alter:before_record")
        if self.changes.record(target):
            crash_point("alter:after_record")
            self.changes.apply(topic, target)
            crash_point("alter:after_apply")
            return result.model_copy(update={"undeleted_partition_count": partitions,
                                             "topic_version": target.topic_version, "event": target.event})
        winner = self.admin.image(topic).record(target.topic_version)
        if winner is not None and essence(winner) == essence(target):
            self.changes.apply(topic, winner)
            return result.model_copy(update={
                "undeleted_partition_count": partitions, "topic_version": winner.topic_version,
                "note": f"another controller made this change ({winner.changed_by}); nothing more to do",
            })
        raise ConcurrentTopicChangeError(
            f"'{topic}' was changed by another controller first (version {target.topic_version}: "
            f"{winner.event.value if winner else 'unknown'} to {winner.undeleted_partition_count if winner else '?'} "
            f"undeleted partitions); nothing was changed here: check `lakelog topics describe --topic {topic}` and re-run"
        )

    def delete(self, topic: str) -> TopicRecord:
        """Delete ``topic`` (or finish its interrupted deletion): see ``controller.deletion``."""
        return delete_topic(self.spark, self.layout.root, self.changes, topic)

    def resume(self, topic: str) -> TopicRecord:
        """Finish whatever the latest record asks for; return it (a no-op when nothing is pending)."""
        return self._resume(topic)[0]

    def tick(self, topic: str | None = None, delete_delay: float | None = None) -> list[TickResult]:
        """Rule 7, run periodically: retire marked partitions that are drained or past the delete delay.

        Drained is the source's "log start == log end": the partition holds no records, or every
        group consuming the topic has consumed it to its log end (``rules.drained``). A retired
        partition goes to mode None (producers and consumers skip it) and then its rows are
        deleted; its records stay in the record history, Delta's history and change feed.
        """
        delay = self.settings.delete_delay_seconds if delete_delay is None else delete_delay
        if not isinstance(delay, (int, float)) or math.isnan(delay) or delay < 0:
            raise InvalidConfigurationError(
                f"invalid delete delay {delete_delay}: pass a number of seconds >= 0 (--delete-delay)"
            )
        images = self.admin.images()
        names = [topic] if topic is not None else sorted(images)
        out = []
        for name in names:
            latest = images[name].latest if name in images else None
            if latest is not None and latest.event is TopicEvent.DELETED and topic is None:
                continue
            if latest is not None and latest.event is TopicEvent.DELETING:  # a deletion killed halfway
                done = finish_deletion(self.spark, self.layout.root, self.changes, latest)
                out.append(TickResult(topic=name, topic_version=done.topic_version, resumed=True, deleted=True))
                continue
            try:
                result = self._tick(name, float(delay))
                if latest is not None and latest.event is not TopicEvent.DELETED:
                    result = result.model_copy(update=self._maintain(name))
            except LOST_ROOT as exc:  # one topic's lost root does not stop the others' upkeep
                if topic is not None:
                    raise
                result = TickResult(topic=name, topic_version=latest.topic_version if latest else 0, error=str(exc))
            out.append(result)
        return out

    def _maintain(self, topic: str) -> dict:
        """A tick's upkeep of a live topic's log after retirement: record log starts and cleaned
        offsets a killed controller left unrecorded, apply retention, merge small files, then
        clean keys (a compacted topic)."""
        record = self.admin.get(topic)
        config = self.logs.config(record)
        self.logs.record_missing(record)
        if config.compacted:
            self.logs.record_missing_cleanings(record)
        return {"log_starts": self.logs.apply_retention(record, config),
                "compacted": self.logs.compact(record, config, min_files=self.settings.compaction_min_files),
                "cleaned": self.logs.compact_keys(record, config, barriers=self.barriers(topic))}

    def _tick(self, topic: str, delay: float) -> TickResult:
        for _ in range(ATTEMPTS):
            record, resumed = self._resume(topic)
            result = TickResult(topic=topic, topic_version=record.topic_version, resumed=resumed)
            marked = [p for p in record.partitions if p.mode is Mode.READ_ONLY and p.marked_for_deletion_at]
            if not marked:
                return result
            now = utcnow()
            ends = {p: pm.end_offset for p, pm in TopicLog(self.spark, record.location).metadata().partitions.items()
                    if pm.end_offset is not None}
            spans = {p.partition: (p.start_offset, ends[p.partition]) for p in marked}
            retire, waiting = due(marked, drained_partitions(self.spark, self.layout.root, topic, spans), delay, now)
            if not retire:
                return result.model_copy(update={"waiting": waiting})
            # a group that never read a partition retired past the delay learns it here (crash
            # point before_record: reported, not retired yet; the next tick retires, reporting nothing twice)
            unread = report_unread(self.spark, self.layout.root, topic, {p: spans[p] for p in retire})
            target = plan_retire(record, {p: ends[p] for p in retire}, now)
            crash_point("retire:before_record")
            if not self.changes.record(target):
                continue  # another controller changed the topic first: start over from its result
            crash_point("retire:after_record")
            self.changes.apply(topic, target)
            crash_point("retire:after_apply")
            purged = purge(self.spark, target.location)
            return result.model_copy(update={"topic_version": target.topic_version, "retired": retire,
                                             "purged": purged, "waiting": waiting, "expired_for": unread})
        raise ConcurrentTopicChangeError(f"'{topic}' kept changing under the controller's tick; run it again")

    def _resume(self, topic: str) -> tuple[TopicRecord, bool]:
        record, applied = self.changes.apply(topic)
        purged = purge(self.spark, record.location)
        return record, applied or bool(purged)
