"""Tables lakelog makes on a local root (its own version 0, no JVM): Spark's Delta reads them at
every version, version 0 included, with all their properties; processes racing to make one table
make it once."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from control_plane.layout import RootLayout
from control_plane.tables import FORMAT_PROP, ON_DEMAND, TABLES, ControlTables
from log_store.log_metadata import TopicLogMetadata
from log_store.table_create import create_table
from log_store.topic_log import RECORD_SCHEMA, TopicLog, log_schema


def actions(table: str, version: int = 0) -> list[dict]:
    return [json.loads(line) for line in (Path(table) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def test_tables_made_without_a_jvm_are_read_by_spark_at_version_0_with_their_properties(spark, tmp_path):
    root = str(tmp_path / "root")
    tables = ControlTables(None, RootLayout(root))
    tables.ensure()  # no session given: nothing of this may need one
    log = TopicLog.create(None, str(tmp_path / "root" / "topics" / "t"), TopicLogMetadata.initial("t", 3))
    for path in [tables.path(name) for name in TABLES if name not in ON_DEMAND] + [log.path]:
        first = actions(path)
        protocol = next(a["protocol"] for a in first if "protocol" in a)
        if protocol["minWriterVersion"] == 7:  # NOT NULL columns: Spark wants invariants listed
            assert "invariants" in protocol["writerFeatures"], path
        assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 0, path
        conf = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
        assert conf.get("delta.enableChangeDataFeed") == "true", path
        if "control" in path:
            assert conf.get(FORMAT_PROP) == "3", path
        else:
            assert TopicLogMetadata.from_properties(conf) == TopicLogMetadata.initial("t", 3)
    assert spark.read.format("delta").load(log.path).schema == log_schema(RECORD_SCHEMA)


def _make(path: str, start, out) -> None:
    start.wait()
    try:
        create_table(None, path, RECORD_SCHEMA, {"delta.enableChangeDataFeed": "true", "lakelog.x": "1"}, "partition")
        out.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put(repr(exc))


def test_processes_racing_to_make_one_table_make_it_once(tmp_path):
    path = str(tmp_path / "t")
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_make, args=(path, start, out)) for _ in range(6)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert sorted(out.get(timeout=5) for _ in procs) == ["ok"] * 6
    names = sorted(f.name for f in (Path(path) / "_delta_log").iterdir())
    assert names == [f"{0:020d}.json"], "one version 0, no staged file left behind"
    meta = next(a["metaData"] for a in actions(path) if "metaData" in a)
    assert meta["configuration"]["lakelog.x"] == "1" and meta["partitionColumns"] == ["partition"]


def test_a_root_of_the_format_before_is_raised_by_the_first_write_and_others_are_refused(spark, tmp_path):
    """Format 2 kept its counters as table properties only: its releases would miss a raise kept as
    an application version, so this release's first write raises the root to 3, which they refuse."""
    import pytest

    from control_plane.tables import _CHECKED, _RAISED
    from log_store.engine import DeltaTransaction
    from log_store.errors import StorageError

    for name, found, refused in (("two", "2", None), ("four", "4", "a newer lakelog"), ("one", None, "an older")):
        root = str(tmp_path / name)
        ControlTables(spark, RootLayout(root)).ensure()
        txn = DeltaTransaction.start(spark, RootLayout(root).control("topics"))
        txn.commit_properties({FORMAT_PROP: found} if found else {FORMAT_PROP: "1"})
        _CHECKED.discard(root)
        _RAISED.discard(root)
        tables = ControlTables(spark, RootLayout(root))
        if refused:
            with pytest.raises(StorageError, match=refused):
                tables.ensure()
            continue
        tables.check_format()  # a read leaves the format as it is
        assert DeltaTransaction.start(spark, tables.path("topics")).configuration()[FORMAT_PROP] == "2"
        tables.ensure()
        assert DeltaTransaction.start(spark, tables.path("topics")).configuration()[FORMAT_PROP] == "3"


def test_a_table_that_tracks_rows_commits_through_deltas_engine(spark, tmp_path):
    """delta-rs cannot write row tracking (control tables of an earlier release have it): such a
    table's commits go through Delta's engine, chosen by ``commits.start``."""
    from delta.tables import DeltaTable as SparkTable

    from log_store import commits
    from log_store.engine import DeltaTransaction
    from log_store.rs_engine import RsTransaction

    tracked, plain = str(tmp_path / "tracked"), str(tmp_path / "plain")
    (SparkTable.createIfNotExists(spark).location(tracked).addColumn("group", "STRING")
     .property("delta.enableRowTracking", "true").execute())
    create_table(None, plain, RECORD_SCHEMA, {"delta.enableChangeDataFeed": "true"}, "partition")
    assert isinstance(commits.start(spark, tracked), DeltaTransaction)
    assert isinstance(commits.start(spark, plain), RsTransaction)
    commits.start(spark, tracked).commit({}, counters={"lakelog.heartbeat.g.m": 1})
    assert DeltaTransaction.start(spark, tracked).snapshot_app_versions()["lakelog.heartbeat.g.m"] == 1
