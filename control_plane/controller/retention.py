"""Keeping a topic's log bounded: its configuration (``topics alter --config``), retention and
delete-records (raising log start offsets), compaction of small files, and key compaction
(``cleanup.policy=compact``: ``log_store.key_compaction``), recorded in ``key_compactions``.

The log's own commits (``log_store.log_files``) are what producers and consumers obey; this
module decides what to ask of them from the topic's configuration and records each raised log
start in the ``record_deletions`` control table. A controller killed between the two leaves the
log ahead of the table; the next tick records what is missing (``record_missing``).
"""

from __future__ import annotations

import time

from pydantic import BaseModel
from pyspark.sql import SparkSession

from control_plane.records import TopicRecord, utcnow
from control_plane.tables import TABLES, ControlTables
from control_plane.topic_config import (
    TIMESTAMP_TYPE,
    TopicConfig, changed, latest_config, log_key, parse_pairs, recorded_log_starts,
)
from log_store.cleaning import Cleaner
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.frames import arrow_rows
from log_store.file_compaction import Compaction, compact_partitions
from log_store.log_files import LogStartChange, partition_files, raise_log_starts, retention_start
from log_store.key_compaction import Barriers, KeyCompaction, cleaned_offsets, compact_keys
from log_store.timestamp_types import CREATE_TIME
from log_store.topic_log import TopicLog


class ConfigChange(BaseModel):
    topic: str
    config_version: int
    config: dict[str, str]  # every key, defaults included


class LogMaintenance:
    """Configuration, retention, delete-records and compaction of the topics under one root."""

    def __init__(self, spark: SparkSession, tables: ControlTables, changed_by: str = "lakelog") -> None:
        self.spark, self.tables, self.changed_by = spark, tables, changed_by

    # -- configuration -------------------------------------------------------------------------
    def config(self, record: TopicRecord) -> TopicConfig:
        return TopicConfig.of(latest_config(self.tables.rows("topic_configs"), record.location)[1])

    def alter_config(self, record: TopicRecord, pairs: list[str], delete: list[str],
                     replace: bool = False) -> ConfigChange:
        """Set ``pairs`` (``key=value``) and remove ``delete`` keys (back to their defaults) in one
        new configuration version; two racing changes both land, one after the other. ``replace``:
        ``pairs`` become the whole configuration, every other key back to its default (Kafka's
        legacy AlterConfigs)."""
        set_ = parse_pairs(pairs)
        self.tables.ensure()
        path = self.tables.path("topic_configs")

        def attempt() -> ConfigChange:
            txn = self.tables.rows_transaction("topic_configs")
            txn.read_whole_table()  # a concurrent change makes this one read again
            version, current = latest_config(self.tables.rows("topic_configs", txn.read_version), record.location)
            config = changed({} if replace else current, set_, delete)
            row = {"topic": record.topic, "location": record.location, "config": config,
                   "config_version": version + 1, "changed_at": utcnow(), "changed_by": self.changed_by}
            txn.write_rows(arrow_rows(self.spark, [row], TABLES["topic_configs"]))
            txn.commit({})
            return ConfigChange(topic=record.topic, config_version=version + 1, config=TopicConfig.of(config).as_kafka())

        if TIMESTAMP_TYPE in set_ or TIMESTAMP_TYPE in delete or replace:
            # The log's own property decides appends and reads: switched first, so a change recorded
            # here is in force (running the command again after a crash in between records it).
            TopicLog(self.spark, record.location).switch_timestamp_type(set_.get(TIMESTAMP_TYPE, CREATE_TIME))
        return retry_on_conflict(attempt, attempts=50, backoff_ms=10)

    # -- log starts ------------------------------------------------------------------------------
    def delete_records(self, record: TopicRecord, offsets: dict[int, int]) -> list[LogStartChange]:
        """Kafka's delete-records: each partition's log start to ``offsets[p]`` (refused past the
        log end, with nothing changed), the files wholly below it deleted."""
        changes = raise_log_starts(self.spark, record.location, offsets, check=True)
        crash_point("retention:after_commit")
        self.record(record, changes, "delete-records")
        return changes

    def apply_retention(self, record: TopicRecord, config: TopicConfig, now_ms: int | None = None) -> list[LogStartChange]:
        """Raise log starts as ``retention.ms`` and ``retention.bytes`` ask (nothing if both unlimited,
        or if ``cleanup.policy`` has no ``delete``: a compacted topic keeps its keys' latest records)."""
        if not config.deletes or (config.retention_ms < 0 and config.retention_bytes < 0):
            return []
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        log = TopicLog(self.spark, record.location)
        txn = log.rows_transaction()  # log ends and files of one version
        try:
            snap = log.snapshot(txn=txn)
            files = partition_files(txn)
        finally:
            txn.release()
        wanted = {}
        for p in snap.readable():
            start = retention_start(files.get(p, []), snap.first_offset(p), snap.log_ends[p], now_ms,
                                    config.retention_ms, config.retention_bytes)
            if start > snap.first_offset(p):
                wanted[p] = start
        if not wanted:
            return []
        changes = raise_log_starts(self.spark, record.location, wanted, check=False)
        crash_point("retention:after_commit")
        self.record(record, changes, "retention")
        return changes

    def record(self, record: TopicRecord, changes: list[LogStartChange], reason: str) -> None:
        """Append one ``record_deletions`` row per raised log start."""
        if not changes:
            return
        now = utcnow()
        self.tables.append("record_deletions", [
            {"topic": record.topic, "location": record.location, "partition": c.partition,
             "previous_offset": c.previous, "log_start_offset": c.log_start, "reason": reason,
             "files_removed": c.files_removed, "log_version": c.version, "changed_at": now,
             "changed_by": self.changed_by} for c in changes])

    def record_missing(self, record: TopicRecord) -> list[LogStartChange]:
        """Record log starts the log has and the table lacks (a controller killed between the two)."""
        snap = TopicLog(self.spark, record.location).snapshot()
        if not snap.log_starts:
            return []
        known = recorded_log_starts(self.tables.rows("record_deletions"), record.location)
        missing = [LogStartChange(partition=p, previous=known.get(p, 0), log_start=o, files_removed=0, version=snap.version)
                   for p, o in sorted(snap.log_starts.items()) if o > known.get(p, -1)]
        self.record(record, missing, "recorded after an interruption")
        return missing

    # -- compaction ------------------------------------------------------------------------------
    def compact(self, record: TopicRecord, config: TopicConfig, partitions: list[int] | None = None,
                min_files: int = 2) -> list[Compaction]:
        """Merge small files of each partition with at least ``min_files`` of them in runs;
        partitions share a commit while their runs fit ``segment.bytes`` or ``COMMIT_BYTES``
        (``compact_partitions``)."""
        return compact_partitions(self.spark, record.location, config.segment_bytes, partitions, min_files)

    # -- key compaction ----------------------------------------------------------------------------
    def compact_keys(self, record: TopicRecord, config: TopicConfig, partitions: list[int] | None = None,
                     now_ms: int | None = None, barriers: Barriers | None = None) -> list[KeyCompaction]:
        """Kafka's log cleaning of a topic whose ``cleanup.policy`` has ``compact`` (nothing for
        others): each due partition keeps its keys' latest records, topic-wide across the resizes
        ``barriers`` gives (``log_store.key_order``); one ``key_compactions`` row per partition cleaned."""
        if not config.compacted:
            return []
        cleaner = Cleaner(min_lag_ms=config.min_compaction_lag_ms, max_lag_ms=config.max_compaction_lag_ms,
                          delete_retention_ms=config.delete_retention_ms,
                          min_dirty_ratio=config.min_cleanable_dirty_ratio)
        done = compact_keys(self.spark, record.location, cleaner, config.segment_bytes, partitions, now_ms, barriers)
        crash_point("compaction:after_commit")
        self.record_cleanings(record, done)
        return done

    def record_cleanings(self, record: TopicRecord, done: list[KeyCompaction]) -> None:
        if not done:
            return
        now = utcnow()
        self.tables.ensure_table("key_compactions")
        self.tables.append("key_compactions", [
            {"topic": record.topic, "location": record.location, **c.model_dump(exclude={"version"}),
             "log_version": c.version, "changed_at": now, "changed_by": self.changed_by} for c in done])

    def record_missing_cleanings(self, record: TopicRecord) -> list[KeyCompaction]:
        """Record cleaned offsets the log has and ``key_compactions`` lacks (a controller killed
        between the two): a row per partition, its counts unknown (0)."""
        version, cleaned = cleaned_offsets(self.spark, record.location)
        if not cleaned:
            return []
        known: dict[int, int] = {}
        for r in self.tables.rows("key_compactions") if self.tables.exists("key_compactions") else []:
            if log_key(r["location"]) == log_key(record.location):
                known[r["partition"]] = max(known.get(r["partition"], -1), r["cleaned_up_to"])
        missing = [KeyCompaction(partition=p, reason="recorded after an interruption", records_before=0,
                                 records_after=0, files_removed=0, files_added=0, previous_cleaned=known.get(p, 0),
                                 cleaned_up_to=o, version=version)
                   for p, o in sorted(cleaned.items()) if o > known.get(p, -1)]
        self.record_cleanings(record, missing)
        return missing
