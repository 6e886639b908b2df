"""Edges of ``lakelog topics table``: the records a run reports merged over many micro-batches, and a
key deleted after it moved partitions in a resize, its tombstone then compacted away. The table is
read back with delta-rs."""

from __future__ import annotations

import json
import time

from deltalake import DeltaTable

from control_plane.controller import TopicController
from log_store.partitioner import partition_for
from tests.jobs.test_table_view import _jsonl, _state


def test_a_run_counts_the_records_of_every_micro_batch(run, spark, tmp_path):
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    records = [(f"sku-{i}", str(i)) for i in range(6)]
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "in.jsonl", records)).exit_code == 0
    table = str(tmp_path / "now")
    # a retention of 2 progress updates stands for the default 100 (a run of 6 batches, not 300)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "2")
    try:
        out = run("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", str(tmp_path / "ck"),
                  "--max-offsets-per-trigger", "1", "--json")
    finally:
        spark.conf.unset("spark.sql.streaming.numRecentProgressUpdates")
    assert out.exit_code == 0, out.output
    assert _state(table) == dict(records)
    assert json.loads(out.stdout)["records"] == len(records)


def test_a_key_deleted_after_it_moved_partitions_stays_deleted_once_its_tombstone_is_compacted(run, spark, tmp_path,
                                                                                             root):
    moved = next(f"sku-{i}" for i in range(100) if partition_for(f"sku-{i}".encode(), 2) == 1)
    assert run("topics", "create", "--topic", "prices", "--partitions", "1", "--config", "cleanup.policy=compact",
               "--config", "min.cleanable.dirty.ratio=0", "--config", "delete.retention.ms=0").exit_code == 0
    before = [(moved, "v1"), ("stays", "x")]
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "d1.jsonl", before)).exit_code == 0
    ctl = TopicController(spark, root)
    now = int(time.time() * 1000) + 1000
    assert [c.records_after for c in ctl.compact_keys("prices", now_ms=now)] == [2], "partition 0 clean before"
    assert run("topics", "alter", "--topic", "prices", "--partitions", "2").exit_code == 0
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "d2.jsonl", [(moved, None)])).exit_code == 0
    location = ctl.admin.get("prices").location

    def held():
        log = DeltaTable(location).to_pyarrow_table(columns=["partition", "key", "value"])
        return sorted((r["partition"], bytes(r["key"]).decode(), r["value"] is None) for r in log.to_pylist())

    done = ctl.compact_keys("prices", now_ms=now)
    assert [(c.partition, c.reason) for c in done] == [(0, "superseded in another partition"), (1, "dirty ratio")]
    assert held() == [(0, "stays", False), (1, moved, True)], "v1 superseded by the tombstone of a later era"
    ctl.compact_keys("prices", now_ms=now + 1)  # the tombstone past delete.retention.ms=0
    assert held() == [(0, "stays", False)], "the tombstone goes once no older record of its key is left"

    table = str(tmp_path / "now")
    out = run("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", str(tmp_path / "ck"))
    assert out.exit_code == 0, out.output
    assert _state(table) == {"stays": "x"}, "a key deleted after it moved partitions is back in the table"


def test_a_topic_deleted_and_created_again_is_a_one_line_error_for_the_table(run, tmp_path):
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    old = _jsonl(tmp_path, "old.jsonl", [("a", "1"), ("b", "1")])
    assert run("produce", "--topic", "prices", "--input", old).exit_code == 0
    args = ("topics", "table", "--topic", "prices", "--output", str(tmp_path / "now"), "--checkpoint",
            str(tmp_path / "ck"))
    assert run(*args).exit_code == 0
    assert run("topics", "delete", "--topic", "prices").exit_code == 0
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "new.jsonl", [("a", "2")])).exit_code == 0
    out = run(*args)
    assert out.exit_code == 1 and "deleted and created again" in out.output, out.output
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1, out.output
