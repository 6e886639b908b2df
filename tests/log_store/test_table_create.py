"""Tables lakelog makes on a local root (its own version 0, no JVM): Spark's Delta reads them at
every version, version 0 included, with all their properties; processes racing to make one table
make it once."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from control_plane.layout import RootLayout
from control_plane.tables import FORMAT_PROP, TABLES, ControlTables
from log_store.log_metadata import TopicLogMetadata
from log_store.table_create import create_table
from log_store.topic_log import RECORD_SCHEMA, TopicLog


def actions(table: str, version: int = 0) -> list[dict]:
    return [json.loads(line) for line in (Path(table) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def test_tables_made_without_a_jvm_are_read_by_spark_at_version_0_with_their_properties(spark, tmp_path):
    root = str(tmp_path / "root")
    tables = ControlTables(None, RootLayout(root))
    tables.ensure()  # no session given: nothing of this may need one
    log = TopicLog.create(None, str(tmp_path / "root" / "topics" / "t"), TopicLogMetadata.initial("t", 3))
    for path in [tables.path(name) for name in TABLES if name not in ("topic_replicas", "servers")] + [log.path]:
        first = actions(path)
        protocol = next(a["protocol"] for a in first if "protocol" in a)
        if protocol["minWriterVersion"] == 7:  # NOT NULL columns: Spark wants invariants listed
            assert "invariants" in protocol["writerFeatures"], path
        assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 0, path
        conf = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
        assert conf.get("delta.enableChangeDataFeed") == "true", path
        if "control" in path:
            assert conf.get(FORMAT_PROP) == "2", path
        else:
            assert TopicLogMetadata.from_properties(conf) == TopicLogMetadata.initial("t", 3)
    assert spark.read.format("delta").load(log.path).schema == RECORD_SCHEMA


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
