"""Edges of ``lakelog topics table``: the records a run reports merged over many micro-batches, and a
key deleted after it moved partitions in a resize, its tombstone then compacted away. The table is
read back with delta-rs."""

from __future__ import annotations

import json
import time

import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from log_store.partitioner import partition_for
from tests.jobs.test_table_view import _jsonl, _state


@pytest.mark.long  # 8 s; the table view's runs are counted in test_table_view.py too
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


def _offsets_of(table: str, key: str) -> list[int]:
    """The offset of ``key``'s row in each version of ``table`` that holds it, oldest first."""
    latest = DeltaTable(table).version()
    out = []
    for version in range(latest + 1):
        rows = DeltaTable(table, version=version).to_pyarrow_table(columns=["key", "offset"]).to_pylist()
        out += [r["offset"] for r in rows if bytes(r["key"]).decode() == key]
    return out


def test_a_second_query_into_the_table_is_refused_and_never_rolls_a_key_back(run, tmp_path):
    """Two queries merging into one table: the one behind would merge a key's older record over the
    newer one the other merged (a MERGE cannot tell them apart). The table is kept by one checkpoint;
    another is refused until it rebuilds the table (--replace)."""
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    table = str(tmp_path / "now")
    first = ("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", str(tmp_path / "ck1"))
    for i, value in enumerate(("1", "2", "3")):
        assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, f"{i}.jsonl", [("a", value)])).exit_code == 0
        assert run(*first).exit_code == 0
    assert _state(table) == {"a": "3"}
    second = ("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", str(tmp_path / "ck2"),
              "--max-offsets-per-trigger", "1")
    out = run(*second)
    offsets = _offsets_of(table, "a")
    assert offsets == sorted(offsets), f"the key was rolled back to an older record: offsets {offsets}"
    assert out.exit_code == 1 and "is kept by the query with checkpoint" in out.output, out.output
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1, out.output

    assert run(*second, "--replace").exit_code == 0  # rebuilt from the first record, now kept by ck2
    assert _state(table) == {"a": "3"}
    out = run(*first)
    assert out.exit_code == 1 and "ck2" in out.output, out.output
    out = run(*second, "--replace")
    assert out.exit_code == 1 and "give a new --checkpoint" in out.output, out.output
    assert _state(table) == {"a": "3"}


def test_a_topic_created_again_is_refused_with_a_new_checkpoint_until_replace(run, tmp_path):
    """The old checkpoint is refused by the stream; a new one would merge the new topic's records over
    the old topic's rows, keeping keys the topic no longer has: refused too, until --replace."""
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    old = _jsonl(tmp_path, "old.jsonl", [("a", "1"), ("b", "1")])
    assert run("produce", "--topic", "prices", "--input", old).exit_code == 0
    table = str(tmp_path / "now")
    assert run("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", str(tmp_path / "ck")).exit_code == 0
    assert run("topics", "delete", "--topic", "prices").exit_code == 0
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "new.jsonl", [("a", "2")])).exit_code == 0
    again = ("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", str(tmp_path / "ck-new"))
    out = run(*again)
    assert _state(table) != {"a": "2", "b": "1"}, "the old topic's key b is kept beside the new topic's records"
    assert out.exit_code == 1 and "deleted and created again" in out.output and "--replace" in out.output, out.output
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) == 1, out.output
    assert _state(table) == {"a": "1", "b": "1"}
    assert run(*again, "--replace").exit_code == 0
    assert _state(table) == {"a": "2"}
    assert run(*again).exit_code == 0  # kept by this checkpoint and this topic now


def test_a_table_made_before_tables_named_their_owner_is_taken_by_its_next_run(run, spark, tmp_path):
    assert run("topics", "create", "--topic", "prices", "--partitions", "1").exit_code == 0
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "in.jsonl", [("a", "1")])).exit_code == 0
    table = str(tmp_path / "now")
    spark.createDataFrame([(b"z", b"0")], "key binary, value binary").selectExpr(
        "key", "value", "CAST(NULL AS array<struct<key:string,value:binary>>) AS headers", "current_timestamp() AS "
        "timestamp", "'prices' AS topic", "0 AS partition", "CAST(0 AS BIGINT) AS offset").write.format("delta").save(table)
    args = ("topics", "table", "--topic", "prices", "--output", table, "--checkpoint")
    assert run(*args, str(tmp_path / "ck")).exit_code == 0
    assert _state(table) == {"z": "0", "a": "1"}
    out = run(*args, str(tmp_path / "other"))
    assert out.exit_code == 1 and "is kept by the query with checkpoint" in out.output, out.output
