"""The audit of a topic with transactions: markers are no records (never owed, their offsets
gaps); a read_committed sink owes the committed records only and may hold no aborted record nor
one past the last stable offset; a read_uncommitted sink owes every record. A real violation
still fails: a reordered key, a committed record missing, an aborted record or a marker
delivered."""

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from click.testing import CliRunner
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from control_plane.topics import TopicAdmin
from jobs.cli import cli
from log_store.table_create import create_table
from log_store.topic_log import RECORD_SCHEMA
from log_store.txn_markers import write_markers
from pipelines.audit import run_audit
from pipelines.consumer import SINK_SCHEMA, Consumer
from pipelines.settings import ConsumerSettings

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
LOG_CHECKS = ["log.offsets_unique", "log.offsets_dense", "log.epochs_non_decreasing"]
ABORTED, UNSTABLE = {(0, 2), (1, 1)}, {(0, 7), (0, 8)}


class Appends:
    """Keyed appends of plain and transactional producers, each numbering its own sequences."""

    def __init__(self, log) -> None:
        self.log, self.marks = log, {}

    def send(self, producer: str, partition: int, keys: list[str], epoch: int | None = None) -> None:
        mark, n = self.marks.get(producer, -1), len(keys)
        rows = pa.table({"partition": pa.array([partition] * n, pa.int32()), "key": [k.encode() for k in keys],
                         "value": [f"{producer}-{k}".encode() for k in keys], "headers": pa.nulls(n, HEADERS),
                         "timestamp": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, "producer_id": [producer] * n,
                         "sequence": list(range(mark + 1, mark + 1 + n))})
        self.log.append_rows(rows, 2, {producer: mark}, transactional=None if epoch is None else {producer: epoch})
        self.marks[producer] = mark + n

    def end(self, producer: str, commit: bool, partitions: list[int]) -> None:
        write_markers(self.log, producer, 0, commit, partitions, 2)


@pytest.fixture(scope="module")
def topic(spark, tmp_path_factory):
    """p0: plain k0 (0), co k1 (1), ab k2 (2), co k1 (3), commit (4), abort (5), plain k0 (6), open
    k3 (7), plain k0 (8); p1: co k4 (0), ab k5 (1), commit (2), abort (3), plain k6 (4). Consumed by
    a read_committed group into one sink (p0 up to its last stable offset, 7) and by a
    read_uncommitted one into another."""
    root = str(tmp_path_factory.mktemp("audit_txn") / "root")
    admin = TopicAdmin(spark, root)
    admin.create("t", 2)
    tx = Appends(admin.log("t"))
    tx.send("plain", 0, ["k0"])
    tx.send("co", 0, ["k1"], epoch=0)
    tx.send("ab", 0, ["k2"], epoch=0)
    tx.send("co", 0, ["k1"], epoch=0)
    tx.send("co", 1, ["k4"], epoch=0)
    tx.send("ab", 1, ["k5"], epoch=0)
    tx.end("co", True, [0, 1])
    tx.end("ab", False, [0, 1])
    tx.send("plain", 0, ["k0"])
    tx.send("open", 0, ["k3"], epoch=0)
    tx.send("plain", 0, ["k0"])
    tx.send("plain", 1, ["k6"])
    Consumer(spark, root, "t", "rc", ConsumerSettings(isolation_level="read_committed")).run_to_sink(f"{root}/rc")
    Consumer(spark, root, "t", "ru").run_to_sink(f"{root}/ru")
    return root


def offsets(spark, sink):
    return {(r["partition"], r["offset"]) for r in spark.read.format("delta").load(sink).collect()}


def failed(report):
    return sorted(c.name for c in report.checks if not c.passed)


def checks(report):
    return {c.name: c for c in report.checks}


def test_each_level_passes_on_what_its_consumer_delivered(spark, topic, tmp_path):
    every = {(0, 0), (0, 1), (0, 2), (0, 3), (0, 6), (0, 7), (0, 8), (1, 0), (1, 1), (1, 4)}
    assert offsets(spark, f"{topic}/ru") == every
    assert offsets(spark, f"{topic}/rc") == every - ABORTED - UNSTABLE
    ru = run_audit(spark, topic, "t", f"{topic}/ru", str(tmp_path / "ru.md"), group="ru")
    assert ru.passed, failed(ru)
    assert list(checks(ru))[3:] == ["sink.no_duplicates", "sink.per_key_order", "sink.records_match_log",
                                    "sink.nothing_missing"], "no read_committed check at read_uncommitted"
    assert checks(ru)["sink.nothing_missing"].checked == 10, "the four markers are owed to no one"
    assert checks(ru)["log.offsets_dense"].checked == 14, "markers hold their offsets in the log"
    rc = run_audit(spark, topic, "t", f"{topic}/rc", str(tmp_path / "rc.md"), group="rc", isolation_level="read_committed")
    assert rc.passed, failed(rc)
    assert checks(rc)["sink.nothing_missing"].checked == 6 and checks(rc)["sink.read_committed"].checked == 6


def test_the_level_judged_decides_what_is_owed_and_what_is_forbidden(spark, topic, tmp_path):
    rc_as_ru = run_audit(spark, topic, "t", f"{topic}/rc", str(tmp_path / "a.md"), group="rc")
    assert failed(rc_as_ru) == ["sink.nothing_missing"]
    missing = checks(rc_as_ru)["sink.nothing_missing"]
    assert {(s["partition"], s["offset"]) for s in missing.samples} == ABORTED | UNSTABLE
    res = CliRunner().invoke(cli, ["--root", topic, "audit", "--topic", "t", "--sink", f"{topic}/ru", "--group", "ru",
                                   "--isolation-level", "read_committed", "--json"], catch_exceptions=False)
    assert res.exit_code == 1, res.output
    ru_as_rc = json.loads(res.stdout)
    assert sorted(c["name"] for c in ru_as_rc["checks"] if not c["passed"]) == ["sink.read_committed"]
    wrong = next(c for c in ru_as_rc["checks"] if c["name"] == "sink.read_committed")
    assert {(s["partition"], s["offset"], s["txn"]) for s in wrong["samples"]} == {
        (0, 2, "aborted"), (1, 1, "aborted"), (0, 7, "unstable"), (0, 8, "unstable")}


def copy_of(spark, topic, tmp_path, where="false"):
    """A sink written like ``rc`` (the log's rows the read_committed group delivered, and more by
    ``where``), in one commit per partition."""
    loc = TopicAdmin(spark, topic).get("t").location
    log = spark.read.format("delta").load(loc).select(F.lit("t").alias("topic"), *RECORD_SCHEMA.fieldNames())
    sink = str(tmp_path / "sink")
    create_table(spark, sink, SINK_SCHEMA, {"delta.enableChangeDataFeed": "true"}, what="the sink")
    delivered = "(partition = 0 AND offset IN (0, 1, 3, 6)) OR (partition = 1 AND offset IN (0, 4))"
    for p in (0, 1):
        log.where(f"partition = {p} AND (({delivered}) OR ({where}))").write.format("delta").mode("append").save(sink)
    return sink, log


def test_an_aborted_record_or_a_marker_delivered_to_a_read_committed_sink_fails(spark, topic, tmp_path):
    sink, _log = copy_of(spark, topic, tmp_path, "partition = 0 AND offset IN (2, 4)")  # aborted k2, the commit marker
    report = run_audit(spark, topic, "t", sink, str(tmp_path / "r.md"), group="rc", isolation_level="read_committed")
    assert failed(report) == ["sink.read_committed", "sink.records_match_log"]
    assert [(s["offset"], s["txn"]) for s in checks(report)["sink.read_committed"].samples] == [(2, "aborted")]
    assert [s["offset"] for s in checks(report)["sink.records_match_log"].samples] == [4]


def test_a_committed_record_missing_or_reordered_fails(spark, topic, tmp_path):
    sink, log = copy_of(spark, topic, tmp_path)
    DeltaTable.forPath(spark, sink).delete("partition = 1 AND offset = 0")  # co's k4: its transaction not whole
    late = log.where("partition = 0 AND offset = 1")  # co's first k1, delivered again after its second
    report = run_audit(spark, topic, "t", sink, str(tmp_path / "m.md"), group="rc", isolation_level="read_committed")
    assert failed(report) == ["sink.nothing_missing"]
    assert [(s["partition"], s["offset"]) for s in checks(report)["sink.nothing_missing"].samples] == [(1, 0)]
    other = tmp_path / "other"
    other.mkdir()
    sink2 = str(other / "sink")
    create_table(spark, sink2, SINK_SCHEMA, {"delta.enableChangeDataFeed": "true"}, what="the sink")
    log.where("(partition = 0 AND offset IN (0, 3, 6)) OR (partition = 1 AND offset IN (0, 4))") \
        .write.format("delta").mode("append").save(sink2)
    late.write.format("delta").mode("append").save(sink2)
    report = run_audit(spark, topic, "t", sink2, str(tmp_path / "o.md"), group="rc", isolation_level="read_committed")
    assert failed(report) == ["sink.per_key_order"]
    assert [(s["offset"], s["key"]) for s in checks(report)["sink.per_key_order"].samples] == [(1, "k1")]
