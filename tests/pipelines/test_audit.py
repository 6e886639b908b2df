"""The ordering audit on real Delta tables: a clean run passes; each corruption is named precisely."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.records import TopicEvent, utcnow
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from log_store.log_metadata import Mode
from log_store.table_create import create_table
from log_store.topic_log import RECORD_SCHEMA
from pipelines.audit import run_audit
from pipelines.consumer import SINK_SCHEMA, Consumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings
from tests.support import forget_commits_before, make_records

CHECKS = ["log.offsets_unique", "log.offsets_dense", "log.epochs_non_decreasing",
          "sink.no_duplicates", "sink.per_key_order", "sink.records_match_log", "sink.nothing_missing"]


@pytest.fixture(scope="module")
def shared(spark, tmp_path_factory):
    """One topic (4 partitions, 200 keyed records) consumed exactly once into a sink."""
    root = str(tmp_path_factory.mktemp("audit") / "root")
    TopicAdmin(spark, root).create("t", 4)
    Producer(spark, root, "t", "p1").send(make_records(spark, 200, keys=10))
    Consumer(spark, root, "t", "g").run_to_sink(f"{root}/sink")
    return root


def audit_cli(root, *args):
    return CliRunner().invoke(cli, ["--root", root, "audit", *args], catch_exceptions=False)


def sink_copy(shared, tmp_path):
    dst = str(tmp_path / "sink")
    shutil.copytree(f"{shared}/sink", dst)
    return dst


def by_name(report):
    return {c["name"]: c for c in report["checks"]}


def failed(report):
    return sorted(c["name"] for c in report["checks"] if not c["passed"])


def test_clean_produce_consume_passes(shared, tmp_path):
    res = audit_cli(shared, "--topic", "t", "--sink", f"{shared}/sink", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["passed"] and list(by_name(report)) == CHECKS
    assert all(c["checked"] == 200 and c["violations"] == 0 for c in report["checks"])
    text = Path(report["report_path"]).read_text()
    assert report["report_path"].startswith(f"{RootLayout(shared).root}/audit/t-") and "PASSED" in text
    table = audit_cli(shared, "--topic", "t", "--report", str(tmp_path / "r.md"))  # log only, rich table
    assert table.exit_code == 0 and "PASSED" in table.stdout and str(tmp_path / "r.md") in table.stdout
    assert "sink: `(not audited)`" in (tmp_path / "r.md").read_text()


def test_sink_with_duplicate(spark, shared, tmp_path):
    sink = sink_copy(shared, tmp_path)
    again = spark.read.format("delta").load(sink).where("partition = 1 AND offset IN (4, 5)")
    again.write.format("delta").mode("append").save(sink)
    report = run_audit(spark, shared, "t", sink, str(tmp_path / "dup.md"))
    assert [c.name for c in report.checks if not c.passed] == ["sink.no_duplicates"]
    dup = next(c for c in report.checks if c.name == "sink.no_duplicates")
    assert dup.violations == 2 and dup.checked == 202
    assert [(s["partition"], s["offset"], s["copy"]) for s in dup.samples] == [(1, 4, 2), (1, 5, 2)]
    assert all(s["key"].startswith("k") for s in dup.samples)
    assert "sink.no_duplicates: 2 violations" in (tmp_path / "dup.md").read_text()


def test_a_sink_holding_records_of_another_history_at_the_logs_offsets_fails(spark, shared, tmp_path):
    """A sink whose rows at some offsets are not the records the log holds there (a group that read
    a history an unclean election took back: the positions match, the records do not) fails twice:
    those rows are not the log's, and the log's records at those offsets were never delivered."""
    loc = TopicAdmin(spark, shared).get("t").location
    log = spark.read.format("delta").load(loc).select(F.lit("t").alias("topic"), *RECORD_SCHEMA.fieldNames())
    sink = str(tmp_path / "sink")
    DeltaTable.createIfNotExists(spark).location(sink).addColumns(SINK_SCHEMA).property(
        "delta.enableChangeDataFeed", "true").execute()
    other = F.col("partition") == 2
    lost = log.where(other).withColumn("producer_id", F.lit("lost-history")).withColumn(
        "key", F.concat(F.lit("gone-").cast("binary"), F.col("key")))
    log.where(~other).unionByName(lost).write.format("delta").mode("append").save(sink)
    held = log.where(other).count()
    report = run_audit(spark, shared, "t", sink, str(tmp_path / "history.md"))
    assert sorted(c.name for c in report.checks if not c.passed) == ["sink.nothing_missing", "sink.records_match_log"]
    found = {c.name: c for c in report.checks}
    assert found["sink.records_match_log"].violations == held
    assert all(s["partition"] == 2 and s["producer_id"] == "lost-history" for s in found["sink.records_match_log"].samples)
    assert found["sink.nothing_missing"].violations == held


def test_sink_with_per_key_order_violated(shared, tmp_path, session_of_kind):
    """Partition 0's later records are committed to the sink before its earlier ones."""
    spark = session_of_kind  # a classic session and a Spark Connect one
    loc = TopicAdmin(spark, shared).get("t").location
    log = spark.read.format("delta").load(loc).select(F.lit("t").alias("topic"), *RECORD_SCHEMA.fieldNames())
    sink = str(tmp_path / "sink")
    create_table(spark, sink, SINK_SCHEMA, {"delta.enableChangeDataFeed": "true"}, what="the sink")
    log.where("partition = 0 AND offset >= 5").write.format("delta").mode("append").save(sink)
    log.where("NOT (partition = 0 AND offset >= 5)").write.format("delta").mode("append").save(sink)
    report = run_audit(spark, shared, "t", sink, str(tmp_path / "order.md"), engine="spark")  # Spark's jobs on either session
    assert report.engine == "spark" and [c.name for c in report.checks if not c.passed] == ["sink.per_key_order"]
    order = next(c for c in report.checks if c.name == "sink.per_key_order")
    early = log.where("partition = 0 AND offset < 5").collect()
    # each key of partition 0 that has records before offset 5 regresses once, at its first early record
    keys = {bytes(r["key"]).decode() for r in early}
    assert order.violations == len(keys)
    assert {s["key"] for s in order.samples} == keys
    assert all(s["partition"] == 0 and s["offset"] < 5 and s["sequence"] < s["prev_sequence"] for s in order.samples)


def test_duckdb_and_spark_judge_a_sink_alike(spark, shared, tmp_path):
    """The same sink (a duplicate, keys out of order, records of another history, a partition
    never delivered) judged by Spark's jobs and by DuckDB in this process: the same checks, counts,
    samples and missing ranges."""
    loc = TopicAdmin(spark, shared).get("t").location
    log = spark.read.format("delta").load(loc).select(F.lit("t").alias("topic"), *RECORD_SCHEMA.fieldNames())
    sink = str(tmp_path / "sink")
    create_table(spark, sink, SINK_SCHEMA, {"delta.enableChangeDataFeed": "true"}, what="the sink")
    log.where("partition = 0 AND offset >= 5").write.format("delta").mode("append").save(sink)
    log.where("partition = 0 AND offset >= 5").write.format("delta").mode("append").save(sink)  # copies between
    log.where("partition = 0 AND offset < 5").write.format("delta").mode("append").save(sink)  # a key's records
    log.where("partition = 1").write.format("delta").mode("append").save(sink)
    log.where("partition = 2 AND offset < 7").withColumn("producer_id", F.lit("lost-history")).write.format(
        "delta").mode("append").save(sink)  # partition 3 never delivered
    spark_report = run_audit(spark, shared, "t", sink, str(tmp_path / "s.md"), engine="spark")
    duck_report = run_audit(spark, shared, "t", sink, str(tmp_path / "d.md"), engine="duckdb")
    assert (spark_report.engine, duck_report.engine) == ("spark", "duckdb")
    assert sorted(c.name for c in spark_report.checks if not c.passed) == [
        "sink.no_duplicates", "sink.nothing_missing", "sink.per_key_order", "sink.records_match_log"]
    assert [c.model_dump() for c in duck_report.checks] == [c.model_dump() for c in spark_report.checks]
    assert (tmp_path / "d.md").read_text().split("\n")[5:] == (tmp_path / "s.md").read_text().split("\n")[5:]


def test_a_small_sink_is_audited_without_a_jvm(spark, shared, tmp_path):
    """``lakelog audit`` of a small sink on a local root is a process that starts no JVM
    (``LAKELOG_NO_JVM=1`` makes any use of Spark an error): a clean sink passes, a duplicate fails
    with exit 1; ``--engine spark`` under the same switch is refused (the negative control), and
    without it audits the log in a JVM the command starts (with Delta: not one GX would make)."""
    import os
    import subprocess
    import sys

    from tests.support import PROJECT

    def cli_audit(*args, jvm=False):
        env = {**os.environ, "PYTHONPATH": str(PROJECT)} | ({} if jvm else {"LAKELOG_NO_JVM": "1"})
        return subprocess.run([sys.executable, "-m", "jobs.cli", "--root", shared, "audit", "--topic", "t", *args],
                              capture_output=True, text=True, timeout=300, cwd=PROJECT, env=env)

    clean = cli_audit("--sink", f"{shared}/sink", "--report", str(tmp_path / "clean.md"), "--json")
    assert clean.returncode == 0, clean.stderr[-3000:]
    report = json.loads(clean.stdout)
    assert report["passed"] and report["engine"] == "duckdb" and list(by_name(report)) == CHECKS
    sink = sink_copy(shared, tmp_path)
    spark.read.format("delta").load(sink).where("partition = 1 AND offset = 4").write.format("delta").mode(
        "append").save(sink)
    dup = cli_audit("--sink", sink, "--report", str(tmp_path / "dup.md"))
    assert dup.returncode == 1 and "sink.no_duplicates" in dup.stdout and "duckdb" in dup.stdout, dup.stderr[-3000:]
    refused = cli_audit("--engine", "spark", "--report", str(tmp_path / "spark.md"))
    assert refused.returncode == 1 and "LAKELOG_NO_JVM=1" in refused.stderr
    on_spark = cli_audit("--engine", "spark", "--report", str(tmp_path / "spark.md"), "--json", jvm=True)  # its own JVM
    assert on_spark.returncode == 0 and json.loads(on_spark.stdout)["engine"] == "spark", on_spark.stderr[-3000:]


def sink_kept_since(spark, root, tmp_path, name, before, after, change_feed=True):
    """A sink of topic ``t`` written in one commit per where-clause of ``before`` and ``after``,
    whose commits before ``after`` Delta's log cleanup has removed (a sink kept for months)."""
    from deltalake import DeltaTable as RsTable

    loc = TopicAdmin(spark, root).get("t").location
    log = spark.read.format("delta").load(loc).select(F.lit("t").alias("topic"), *RECORD_SCHEMA.fieldNames())
    sink = str(tmp_path / name)
    DeltaTable.createIfNotExists(spark).location(sink).addColumns(SINK_SCHEMA).property(
        "delta.enableChangeDataFeed", str(change_feed).lower()).execute()
    for where in before:
        log.where(where).write.format("delta").mode("append").save(sink)
    spark.sql(f"ALTER TABLE delta.`{sink}` SET TBLPROPERTIES ('kept' = 'since now')")  # the oldest commit kept
    kept = RsTable(sink).version()
    RsTable(sink).create_checkpoint()
    forget_commits_before(sink, kept)
    for where in after:
        log.where(where).write.format("delta").mode("append").save(sink)
    return sink, log, kept


@pytest.mark.slow  # 27 s; the case of a sink without a change feed stays in the default suite (docs/testing.md)
def test_a_sink_whose_old_commits_delta_removed_is_still_judged(spark, shared, tmp_path):
    """The rows delivered before the oldest commit Delta kept are judged from the sink's current
    rows: a lost record, a duplicate and a key delivered out of order across that point are found."""
    sink, log, kept = sink_kept_since(spark, shared, tmp_path, "clean", ["offset < 10"], ["offset >= 10"])
    report = run_audit(spark, shared, "t", sink)
    assert report.passed, [(c.name, c.violations, c.samples[:3]) for c in report.checks if not c.passed]
    older = log.where("offset < 10").count()
    assert any("could not be read from version 0" in n and f"{older} rows of the sink were delivered before "
               f"version {kept}" in n for n in report.coverage), report.coverage
    lost = sink_copy_of(sink, tmp_path / "lost")
    spark.sql(f"DELETE FROM delta.`{lost}` WHERE partition = 1 AND offset = 3")  # delivered before `kept`
    report = run_audit(spark, shared, "t", lost)
    assert [c.name for c in report.checks if not c.passed] == ["sink.nothing_missing"]
    assert next(c for c in report.checks if c.name == "sink.nothing_missing").violations == 1
    twice = sink_copy_of(sink, tmp_path / "twice")
    log.where("partition = 1 AND offset IN (3, 4)").write.format("delta").mode("append").save(twice)
    report = run_audit(spark, shared, "t", twice)
    assert [c.name for c in report.checks if not c.passed] == ["sink.no_duplicates"]
    assert [(s["partition"], s["offset"], s["copy"]) for s in
            next(c for c in report.checks if c.name == "sink.no_duplicates").samples] == [(1, 3, 2), (1, 4, 2)]
    # partition 0's first records come after the rest of their keys, the rest before `kept`
    late = "partition = 0 AND offset < 10"
    swapped, _, _ = sink_kept_since(spark, shared, tmp_path, "swapped", [f"NOT ({late})"], [late])
    report = run_audit(spark, shared, "t", swapped)
    assert [c.name for c in report.checks if not c.passed] == ["sink.per_key_order"]
    keys = ({bytes(r["key"]) for r in log.where(late).collect()}
            & {bytes(r["key"]) for r in log.where("partition = 0 AND offset >= 10").collect()})
    assert keys and next(c for c in report.checks if c.name == "sink.per_key_order").violations == len(keys)


@pytest.mark.long
def test_a_sink_without_change_feed_whose_old_commits_delta_removed_is_still_judged(spark, shared, tmp_path):
    """An append-only sink (a stream's) gives each row the version of the commit that added its
    file: a file whose commit is gone was delivered before the oldest commit kept."""
    sink, log, kept = sink_kept_since(spark, shared, tmp_path, "clean", ["offset < 10"], ["offset >= 10"], False)
    report = run_audit(spark, shared, "t", sink)
    assert report.passed, [(c.name, c.violations, c.samples[:3]) for c in report.checks if not c.passed]
    assert any(f"commits before version {kept} are gone" in n and f"{log.where('offset < 10').count()} rows" in n
               for n in report.coverage), report.coverage
    late = "partition = 0 AND offset < 10"
    swapped, _, _ = sink_kept_since(spark, shared, tmp_path, "swapped", [f"NOT ({late})"], [late], False)
    report = run_audit(spark, shared, "t", swapped)
    assert [c.name for c in report.checks if not c.passed] == ["sink.per_key_order"]


def sink_copy_of(sink, dst):
    shutil.copytree(sink, dst)
    return str(dst)


@pytest.mark.slow  # 22 s; the unshared sink's case stays in the default suite (docs/testing.md)
def test_a_shared_sink_whose_old_commits_delta_removed_passes_for_each_group(spark, shared, tmp_path):
    """Two groups write one sink; the commits naming the group of its first batches are gone. Each
    group still passes: the rows delivered before are not taken for its duplicates or its order."""
    from deltalake import DeltaTable as RsTable

    sink = str(tmp_path / "shared")
    for g in ("g1", "g2"):
        Consumer(spark, shared, "t", g, ConsumerSettings(max_records_per_batch=60)).run_to_sink(sink, max_records=120)
    kept = RsTable(sink).version()
    RsTable(sink).create_checkpoint()
    forget_commits_before(sink, kept)
    for g in ("g1", "g2"):
        Consumer(spark, shared, "t", g).run_to_sink(sink)
    report = run_audit(spark, shared, "t", sink)
    assert report.passed, [c for c in report.checks if not c.passed]
    assert [c.name for c in report.checks][3:] == [f"{c}[{g}]" for g in ("g1", "g2") for c in CHECKS[3:]]
    assert any("written by 2 groups" in n for n in report.coverage), report.coverage
    spark.sql(f"DELETE FROM delta.`{sink}` WHERE partition = 1 AND offset = 3")  # both groups delivered it before
    report = run_audit(spark, shared, "t", sink)
    assert [c.name for c in report.checks if not c.passed] == ["sink.nothing_missing[g1]", "sink.nothing_missing[g2]"]


@pytest.mark.long
def test_sink_missing_records_grouped_by_retired_partition(spark, root):
    TopicAdmin(spark, root).create("r", 4)
    Producer(spark, root, "r", "p1").send(make_records(spark, 120, keys=12))
    sink = f"{root}/sink"
    Consumer(spark, root, "r", "g").run_to_sink(sink)
    created = TopicAdmin(spark, root).get("r")
    # the last partition with records is retired: its rows are deleted from the log and the sink
    gone = spark.read.format("delta").load(sink).agg(F.max("partition")).first()[0]
    assert gone > 0
    DeltaTable.forPath(spark, created.location).delete(f"partition = {gone}")
    parts = [p.model_copy(update={"mode": Mode.NONE}) if p.partition == gone else p for p in created.partitions]
    retire = created.model_copy(update={"topic_version": 2, "event": TopicEvent.RETIRE, "undeleted_partition_count": 3,
                                        "partitions": parts, "changed_at": utcnow()})
    ControlTables(spark, RootLayout(root)).append("topics", [retire.row()])
    lost = spark.read.format("delta").load(sink).where(f"partition = {gone}").count()
    DeltaTable.forPath(spark, sink).delete(f"partition = {gone} OR (partition = 0 AND offset IN (2, 3, 7))")

    res = audit_cli(root, "--topic", "r", "--sink", sink, "--json", "--samples", "5")
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    assert not report["passed"] and failed(report) == ["sink.nothing_missing"]
    missing = by_name(report)["sink.nothing_missing"]
    assert missing["violations"] == lost + 3 and missing["groups"] == {"retired": lost, "live": 3}
    live = [(r["partition"], r["first"], r["last"]) for r in missing["ranges"] if not r["retired"]]
    assert live == [(0, 2, 3), (0, 7, 7)]
    assert [r["retired"] for r in missing["ranges"]] == [False, False, True]
    assert len(missing["samples"]) == 5 and all(s["key"] and s["sequence"] is not None for s in missing["samples"])
    text = Path(report["report_path"]).read_text()
    assert "FAILED" in text and "| 0 | 2 | 3 | 2 | False |" in text and "| retired |" in text


def test_log_with_gap_duplicate_and_epoch_drop(spark, root, tmp_path):
    """Rows written straight to the log with Delta: p0 skips offsets, p1's epoch drops, p2 repeats."""
    TopicAdmin(spark, root).create("bad", 3)
    loc = TopicAdmin(spark, root).get("bad").location
    rows = [(0, 0, 0), (0, 1, 0), (0, 4, 0), (1, 0, 0), (1, 1, 2), (1, 2, 1), (2, 0, 0), (2, 1, 0), (2, 1, 0)]
    df = spark.createDataFrame(
        [(p, o, e, f"k{p}".encode(), b"v", None, None, "x", o) for p, o, e in rows], RECORD_SCHEMA
    )
    df.write.format("delta").mode("append").save(loc)
    report = run_audit(spark, root, "bad", report_path=str(tmp_path / "log.md"))
    checks = {c.name: c for c in report.checks}
    assert not report.passed and list(checks) == CHECKS[:3]
    assert [(s["partition"], s["offset"], s["prev_offset"]) for s in checks["log.offsets_dense"].samples] == [(0, 4, 1)]
    assert [(s["partition"], s["offset"], s["leader_epoch"], s["prev_epoch"])
            for s in checks["log.epochs_non_decreasing"].samples] == [(1, 2, 1, 2)]
    assert [(s["partition"], s["offset"]) for s in checks["log.offsets_unique"].samples] == [(2, 1)]
    assert all(c.violations == 1 and c.checked == len(rows) for c in checks.values())
    text = (tmp_path / "log.md").read_text()
    assert all(f"## {n}: 1 violations" in text for n in CHECKS[:3]) and "| 0 | 4 | 1 |" in text
    table = audit_cli(root, "--topic", "bad", "--report", str(tmp_path / "cli.md"))
    assert table.exit_code == 1 and "FAILED" in table.stdout and f"report: {tmp_path / 'cli.md'}" in table.stdout


def test_auto_hands_spark_what_duckdb_should_not_judge(spark, shared, tmp_path, monkeypatch):
    """Auto judges on DuckDB only tables delta-rs reads whole and that hold at most the row limit
    together: one row past it, or a sink with deletion vectors (which delta-rs's change feed does
    not apply), and Spark judges; the verdicts stay the same."""
    sink = sink_copy(shared, tmp_path)
    held = 400  # the log's 200 records and the sink's 200
    monkeypatch.setattr("pipelines.audit.run.SMALL_ROWS", held)
    at_limit = run_audit(spark, shared, "t", sink, str(tmp_path / "at.md"))
    assert (at_limit.engine, at_limit.passed) == ("duckdb", True)
    monkeypatch.setattr("pipelines.audit.run.SMALL_ROWS", held - 1)
    past_limit = run_audit(spark, shared, "t", sink, str(tmp_path / "past.md"))
    assert (past_limit.engine, past_limit.passed) == ("spark", True)
    monkeypatch.undo()
    spark.sql(f"ALTER TABLE delta.`{sink}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    with_dvs = run_audit(spark, shared, "t", sink, str(tmp_path / "dv.md"))
    assert (with_dvs.engine, with_dvs.passed) == ("spark", True)
    assert [c.model_dump() for c in with_dvs.checks] == [c.model_dump() for c in at_limit.checks]


def test_bad_input_is_a_clear_error(shared, tmp_path):
    reports = set(Path(shared).glob("audit/*.md"))
    res = audit_cli(shared, "--topic", "nope")
    assert res.exit_code == 1 and "unknown topic 'nope'" in res.output
    res = audit_cli(shared, "--topic", "t", "--sink", str(tmp_path / "no-sink"))
    assert res.exit_code == 1 and "no Delta sink table at" in res.output
    plain = str(tmp_path / "plain")  # a lakelog sink's columns, without a change feed
    write_deltalake(plain, pa.Table.from_pylist([], schema=pa.schema(
        [(f.name, pa.int64() if f.name in ("offset", "sequence") else pa.int32() if f.name == "partition"
          else pa.binary() if f.name in ("key", "value") else pa.string()) for f in SINK_SCHEMA.fields
         if f.name in ("topic", "partition", "offset", "key", "value", "producer_id", "sequence")])))
    res = audit_cli(shared, "--topic", "t", "--sink", plain, "--engine", "duckdb")
    assert res.exit_code == 1 and "cannot run on DuckDB" in res.output and "has no change data feed" in res.output
    res = CliRunner(env={"LAKELOG_AUDIT_ENGINE": "fast"}).invoke(cli, ["--root", shared, "audit", "--topic", "t"])
    assert res.exit_code == 1 and "audit engine 'fast' is not one of auto, spark, duckdb" in res.output
    assert set(Path(shared).glob("audit/*.md")) == reports  # nothing written


@pytest.mark.long
def test_a_stream_sink_compacted_by_optimize_is_judged_by_the_commits_that_delivered_it(spark, shared, tmp_path):
    """OPTIMIZE rewrites a sink's files in one commit that changes no data: the audit dates each
    row by the data-changing commit that delivered it, so a correct sink still passes and a
    reordering inside the compacted range is still found."""
    log = spark.read.format("delta").load(TopicAdmin(spark, shared).get("t").location)
    rows = log.select(F.lit("t").alias("topic"), "partition", "offset", "key", "value")
    in_order, reordered = str(tmp_path / "in-order"), str(tmp_path / "reordered")
    for sink, batches in ((in_order, ["offset < 20", "offset >= 20"]), (reordered, ["offset >= 20", "offset < 20"])):
        for where in batches:
            rows.where(where).write.format("delta").mode("append").save(sink)
        spark.sql(f"OPTIMIZE delta.`{sink}`")
        history = DeltaTable.forPath(spark, sink).history().select("operation").collect()
        assert history[0]["operation"] == "OPTIMIZE"
    report = run_audit(spark, shared, "t", in_order)
    assert report.passed, [(c.name, c.violations, c.samples[:3]) for c in report.checks if not c.passed]
    report = run_audit(spark, shared, "t", reordered)
    assert [c.name for c in report.checks if not c.passed] == ["sink.per_key_order"]
