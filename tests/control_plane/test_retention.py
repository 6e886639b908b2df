"""Retention, delete-records and compaction on real Delta tables: records below a log start are
deleted in whole files and never read again, a group positioned below reports them expired and
moves up, offsets are never reused, and compaction changes no record. Tables are read back with
delta-rs, not lakelog."""

from __future__ import annotations

import json
from types import SimpleNamespace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.layout import RootLayout
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from log_store.errors import OffsetCheckError
from pipelines.audit import run_audit
from pipelines.consumer import Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings
from tests.support import forget_commits_before, log_rows, make_records

T = "ret"


def operation(entry: dict) -> str:
    """What a history entry did: Delta's operation, or the one lakelog names in a delta-rs commit's
    info (delta-rs records its own commits as WRITE)."""
    return entry.get("lakelog.operation") or entry["operation"]


def produce_batches(spark, root, batches: int, size: int = 40, partitions: int = 2) -> Producer:
    """A topic of the partitioned layout (``files_of`` reads its partition folders; the arrival
    layout's retention: tests/log_store/test_arrival_layout.py)."""
    TopicAdmin(spark, root).create(T, partitions, layout="partitioned")
    producer = Producer(spark, root, T, "p")
    for i in range(batches):
        producer.send(make_records(spark, size, keys=7, start=i * size))
    return producer


def files_of(location: str, partition: int) -> list[tuple[int, int]]:
    """(min, max) offsets of each data file of ``partition``, from delta-rs's add actions."""
    adds = pa.table(DeltaTable(location).get_add_actions(flatten=True)).to_pylist()
    return sorted((a["min.offset"], a["max.offset"]) for a in adds if a["partition.partition"] == partition)


def control_rows(root: str, table: str) -> list[dict]:
    path = RootLayout(root).control(table)
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def test_delete_records_removes_whole_files_and_no_reader_sees_below_the_log_start(spark, root):
    produce_batches(spark, root, 4)
    location = TopicAdmin(spark, root).get(T).location
    before = files_of(location, 0)
    cut = before[1][0] + 2  # inside the second file
    ctl = TopicController(spark, root)
    (change,) = ctl.delete_records(T, {0: cut})
    assert (change.previous, change.log_start, change.files_removed) == (0, cut, 1)
    assert files_of(location, 0) == before[1:], "the file wholly below goes; the one holding the cut stays whole"
    # recorded in the control plane, with its history
    (row,) = control_rows(root, "record_deletions")
    assert (row["topic"], row["partition"], row["log_start_offset"], row["reason"]) == (T, 0, cut, "delete-records")
    # a new group starts at the log start: nothing below it, nothing reported expired
    result = Consumer(spark, root, T, "fresh").run_to_sink(f"{root}/fresh")
    assert result.expired == 0
    sunk = DeltaTable(f"{root}/fresh").to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert min(r["offset"] for r in sunk if r["partition"] == 0) == cut
    assert TopicAdmin(spark, root).describe(T).partitions[0].earliest_offset == cut
    # offsets are never reused: the next record lands after the old log end
    end = TopicAdmin(spark, root).log(T).log_end_offsets()[0]
    Producer(spark, root, T, "p2").send(make_records(spark, 20, keys=7))
    assert min(r["offset"] for r in log_rows(root, T) if r["partition"] == 0 and r["producer_id"] == "p2") == end


def test_delete_records_past_the_log_end_is_refused_with_nothing_changed(spark, root):
    produce_batches(spark, root, 1)
    location = TopicAdmin(spark, root).get(T).location
    version = DeltaTable(location).version()
    end = TopicAdmin(spark, root).log(T).log_end_offsets()[0]
    with pytest.raises(OffsetCheckError, match=f"past the log end {end}"):
        TopicController(spark, root).delete_records(T, {0: end + 1})
    assert DeltaTable(location).version() == version
    out = CliRunner().invoke(cli, ["--root", root, "topics", "delete-records", "--topic", T, "--partition", "0",
                                   "--before-offset", str(end + 1)])
    assert out.exit_code == 1 and "past the log end" in out.output
    out = CliRunner().invoke(cli, ["--root", root, "topics", "alter", "--topic", T, "--config", "retention.ms=soon"])
    assert out.exit_code == 1 and "whole number" in out.output
    assert DeltaTable(location).version() == version


def test_retention_planned_before_a_retirement_leaves_the_retired_partition_out(spark, root):
    """Retention reads the log ends, then commits: a partition retired in between is left out
    (its records went with it) and the others' log starts rise; delete-records naming it is
    refused (the campaign's seed 1593: retention failed on a partition retired meanwhile)."""
    from control_plane.settings import ControllerSettings
    from log_store.errors import InvalidConfigurationError
    from log_store.log_files import raise_log_starts

    produce_batches(spark, root, 2)
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    location = TopicAdmin(spark, root).get(T).location
    planned = {p: 2 for p in (0, 1)}  # what retention read while both partitions were live
    ctl.alter(T, 1)
    assert ctl.tick(T, 0.0)[0].retired == [1]
    changes = raise_log_starts(spark, location, planned, check=False)
    assert [(c.partition, c.log_start) for c in changes] == [(0, 2)]
    with pytest.raises(InvalidConfigurationError, match="partition 1 of 'ret' was retired"):
        raise_log_starts(spark, location, {1: 1}, check=True)


@pytest.mark.long
def test_a_group_below_the_log_start_reports_the_records_expired_and_moves_up(spark, root):
    produce_batches(spark, root, 4)
    sink = f"{root}/sink"
    member = GroupConsumer(spark, root, T, "lag", ConsumerSettings(max_records_per_batch=10))
    assert member.run(sink_path=sink, max_records=10, idle_timeout_s=1).records == 10
    at = member.positions
    cut = TopicAdmin(spark, root).log(T).log_end_offsets()[0] - 5
    TopicController(spark, root).delete_records(T, {0: cut})
    again = GroupConsumer(spark, root, T, "lag")
    again.run(sink_path=sink, idle_timeout_s=2)
    expired = again.member.tables.offsets.expired_ranges("lag")
    assert [(r.partition, r.first, r.end) for r in expired] == [(0, at.get(0, 0), cut)], \
        "the records below the log start the group had not read, reported once"
    sunk = DeltaTable(sink).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    got = sorted(r["offset"] for r in sunk if r["partition"] == 0)
    assert got == sorted(set(range(at.get(0, 0))) | set(range(cut, cut + 5))), "nothing below the cut after it"
    assert run_audit(spark, root, T, sink).passed, "the audit counts the expired records, nothing is missing"


@pytest.mark.slow  # 31 s; the audit's own tests of removed commits stay in the default suite (docs/testing.md)
def test_the_audit_judges_what_the_log_remembers_after_vacuum_and_delta_log_cleanup(spark, root):
    """A topic kept for months loses old commit files (Delta's log retention) and, after VACUUM,
    the files retention removed: the audit reads what is left and still catches a lost record.
    Deliveries of records below the log start, which the log no longer remembers, are not judged
    (docs/cli.md): neither missing nor foreign."""
    producer = produce_batches(spark, root, 4)
    location = TopicAdmin(spark, root).get(T).location
    sink = f"{root}/sink"
    Consumer(spark, root, T, "g").run_to_sink(sink)
    cut = files_of(location, 0)[2][0]  # the first two files of partition 0 go
    TopicController(spark, root).delete_records(T, {0: cut})
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{location}` RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    report = run_audit(spark, root, T, sink)  # the change feed's first commits name files now gone
    assert report.passed, [(c.name, c.violations, c.samples[:3]) for c in report.checks if not c.passed]
    assert report.coverage and "version 0" in report.coverage[0], report.coverage
    # A property set on the log table by a user (as docs/operating.md shows) leaves lakelog working;
    # this one makes the next produce write a checkpoint, after which Delta's log cleanup (after
    # delta.logRetentionDuration) removes the older commit files: done here by hand.
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    producer.send(make_records(spark, 10, keys=7, start=1000))
    Consumer(spark, root, T, "g").run_to_sink(sink)
    log = Path(location, "_delta_log")
    checkpoint = max(int(f.name.split(".")[0]) for f in log.glob("*.checkpoint.parquet"))
    forget_commits_before(location, checkpoint)
    report = run_audit(spark, root, T, sink)
    assert report.passed, [c for c in report.checks if not c.passed]
    assert report.coverage and f"version {checkpoint}" in report.coverage[0], report.coverage
    # still an audit: a record of partition 1 taken out of the sink is found missing
    spark.sql(f"DELETE FROM delta.`{sink}` WHERE partition = 1 AND offset = 3")
    report = run_audit(spark, root, T, sink)
    assert [c.name for c in report.checks if not c.passed] == ["sink.nothing_missing"]


def test_the_tick_applies_retention_by_size_and_time(spark, root):
    produce_batches(spark, root, 5)
    ctl = TopicController(spark, root)
    ctl.alter_config(T, ["retention.bytes=1", "segment.bytes=1024"])  # keep at least one byte: the newest file
    (tick,) = ctl.tick(T)
    location = TopicAdmin(spark, root).get(T).location
    for p in (0, 1):
        assert len(files_of(location, p)) == 1, "only the newest file stays (the rest deleted, nothing merged)"
    assert sorted(c.partition for c in tick.log_starts) == [0, 1]
    ctl.alter_config(T, ["retention.ms=0"], ["retention.bytes"])
    (tick,) = ctl.tick(T)
    snap = TopicAdmin(spark, root).log(T).snapshot()
    assert snap.earliest_offsets() == snap.log_ends, "everything older than 0 ms is gone: log start = log end"
    assert files_of(location, 0) == [] and files_of(location, 1) == []
    reasons = [r["reason"] for r in control_rows(root, "record_deletions")]
    assert reasons == ["retention"] * 4
    out = CliRunner().invoke(cli, ["--root", root, "sql", "SELECT reason, count(*) AS n FROM record_deletions "
                                   "GROUP BY reason", "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == [{"reason": "retention", "n": 4}], out.output
    out = CliRunner().invoke(cli, ["--root", root, "sql", "SELECT max(config_version) AS v FROM topic_configs", "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == [{"v": 2}], out.output
    d = json.loads(CliRunner().invoke(cli, ["--root", root, "topics", "describe", "--topic", T, "--json"]).output)
    assert d["config"]["retention.ms"] == "0" and d["config"]["retention.bytes"] == "-1"


@pytest.mark.long
def test_compaction_lists_files_once_and_again_after_another_writer_commits(spark, root, monkeypatch):
    """One compaction commit per partition here: the files listed for the first are reused for
    the second, unless another commit landed in between (a delete-records removing files of the
    second partition); a stale listing would merge files that are gone and fail its count check."""
    from log_store import file_compaction, log_files

    producer = produce_batches(spark, root, 6)
    location = TopicAdmin(spark, root).get(T).location
    monkeypatch.setattr(file_compaction, "compaction_batch", lambda candidates, _bytes: sorted(candidates)[:1])
    listed = []
    real_files = file_compaction.partition_files
    counted = lambda txn: listed.append(txn.read_version) or real_files(txn)  # noqa: E731
    monkeypatch.setattr(file_compaction, "partition_files", counted)
    monkeypatch.setattr(log_files, "partition_files", counted)  # the other writer's listing below
    results = TopicController(spark, root).compact(T)
    assert [(c.partition, c.files_before, c.files_after) for c in results] == [(0, 6, 1), (1, 6, 1)]
    assert results[0].version + 1 == results[1].version and len(listed) == 1, "two commits, one listing"

    for i in range(6, 12):
        producer.send(make_records(spark, 40, keys=7, start=i * 40))
    rows_before = sorted((r["partition"], r["offset"], r["value"]) for r in log_rows(root, T))
    cut = files_of(location, 1)[3][0]  # partition 1's merged file and two small ones go
    starts = []
    real_commits = file_compaction.commits

    def start_with_another_writer_between_commits(spark_, path, what="the table"):
        starts.append(path)
        if len(starts) == 2:  # after the first compaction commit, before the second reads
            TopicController(spark, root).delete_records(T, {1: cut})
        return real_commits.start(spark_, path, what)

    monkeypatch.setattr(file_compaction, "commits", SimpleNamespace(start=start_with_another_writer_between_commits))
    listed.clear()
    results = TopicController(spark, root).compact(T)
    assert [(c.partition, c.files_after) for c in results] == [(0, 1), (1, 1)]
    assert len(listed) == 3, "compaction listed again after the other writer's commit (which listed once)"
    rows_after = sorted((r["partition"], r["offset"], r["value"]) for r in log_rows(root, T))
    assert rows_after == [r for r in rows_before if r[0] == 0 or r[1] >= cut], "nothing lost, moved or added"

    # The other writer commits between the first compaction's read and its commit: the listing
    # that commit planned from is not its successor's either.
    monkeypatch.setattr(file_compaction, "commits", real_commits)
    for i in range(12, 16):
        producer.send(make_records(spark, 40, keys=7, start=i * 40))
    rows_before = sorted((r["partition"], r["offset"], r["value"]) for r in log_rows(root, T))
    cut = files_of(location, 1)[2][0]
    real_point, points = file_compaction.crash_point, []

    def another_writer_inside(step):
        points.append(step)
        if len(points) == 1:
            TopicController(spark, root).delete_records(T, {1: cut})
        real_point(step)

    monkeypatch.setattr(file_compaction, "crash_point", another_writer_inside)
    listed.clear()
    results = TopicController(spark, root).compact(T)
    assert [(c.partition, c.files_after) for c in results] == [(0, 1), (1, 1)]
    operations = {h["version"]: operation(h) for h in DeltaTable(location).history(5)}
    assert operations[results[0].version - 1] == "DELETE", "the other writer committed inside the first compaction"
    assert len(listed) == 3, "listed again after the other writer's commit"
    rows_after = sorted((r["partition"], r["offset"], r["value"]) for r in log_rows(root, T))
    assert rows_after == [r for r in rows_before if r[0] == 0 or r[1] >= cut], "nothing lost, moved or added"


def test_compaction_merges_small_files_and_changes_no_record(spark, root):
    produce_batches(spark, root, 6)
    location = TopicAdmin(spark, root).get(T).location
    rows_before = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in log_rows(root, T))
    feed_before = pa.table(DeltaTable(location).load_cdf(starting_version=0).read_all()).num_rows
    results = TopicController(spark, root).compact(T)
    assert [(c.partition, c.files_before, c.files_after) for c in results] == [(0, 6, 1), (1, 6, 1)]
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in log_rows(root, T)) == rows_before
    assert pa.table(DeltaTable(location).load_cdf(starting_version=0).read_all()).num_rows == feed_before, \
        "a compaction commit adds nothing to the change feed"
    history = DeltaTable(location).history(2)
    assert [operation(h) for h in history][:2] == ["OPTIMIZE", "WRITE"], "both partitions in one commit"
    assert results[0].version == results[1].version == history[0]["version"]
    for f in DeltaTable(location).file_uris():
        offsets = pq.read_table(f, columns=["offset"], partitioning=None).column("offset").to_pylist()
        assert offsets == sorted(offsets), "each merged file is in offset order"
    assert TopicController(spark, root).compact(T) == [], "nothing left to merge"
