"""Rows made in Python reach Delta through Arrow exactly as Spark's own conversion would put them,
without a job in Spark's Python workers (log_store/frames.py)."""

from __future__ import annotations

from datetime import datetime

import pytest

from control_plane.records import GENERATION_SCHEMA, OFFSET_SCHEMA, TOPIC_SCHEMA
from log_store.frames import rows_frame

WHEN = datetime(2026, 11, 24, 21, 37, 19, 15324)  # naive: UTC, as every lakelog timestamp
TP = {"topic": "t", "partition": 2}
CASES = {
    "topics": (TOPIC_SCHEMA, [{
        "topic": "t", "topic_version": 3, "event": "alter", "location": "/r/t", "partition_count": 2,
        "undeleted_partition_count": 1, "changed_at": WHEN, "changed_by": "ctl",
        "partitions": [
            {"partition": 0, "leader_epoch": 1, "mode": "ReadWrite", "start_offset": 0, "end_offset": None,
             "epoch_after_creation": {}, "epoch_before_deletion": None, "marked_for_deletion_at": None, "retired_at": None},
            {"partition": 1, "leader_epoch": 4, "mode": "ReadOnly", "start_offset": 52, "end_offset": 90,
             "epoch_after_creation": {1: 2, 3: 4}, "epoch_before_deletion": {2: 3},
             "marked_for_deletion_at": WHEN, "retired_at": None},
        ]}]),
    "offset_commits": (OFFSET_SCHEMA, [
        {"group": "g", "topic": "t", "partition": p, "offset": 10 * p, "generation": 7, "member_id": "m",
         "committed_at": WHEN, "metadata": "", "kind": "expired" if p else "commit", "end_offset": 99 if p else None}
        for p in range(3)]),
    "group_generations": (GENERATION_SCHEMA, [{
        "group": "g", "generation": 2, "protocol": "cooperative", "assignor": "cooperative-sticky", "leader": "m1",
        "members": [{"member_id": "m1", "protocol": "cooperative", "topics": ["t"], "owned": [TP]}],
        "assignment": [{"member_id": "m1", "partitions": [TP], "warmups": []}], "partitions": [TP], "marked": [],
        "handovers": [{"topic": "t", "partition": 2, "from_member": "m0", "to_member": "m1"}], "revoked": 1,
        "rebalance_ms": 1234, "reason": "join", "created_at": WHEN, "topic_versions": {"t": 3, "u": 1},
        "expired": [{"topic": "t", "partition": 1, "first": 0, "end": 52}]}]),
}


@pytest.mark.parametrize("table", sorted(CASES))
def test_rows_come_back_as_spark_would_make_them(spark, tmp_path, table):
    schema, rows = CASES[table]
    frame = rows_frame(spark, rows, schema)
    expected = spark.createDataFrame(rows, schema)  # Spark's own conversion, through its Python workers
    assert frame.schema == expected.schema
    path = str(tmp_path / table)
    frame.write.format("delta").save(path)
    back = spark.read.format("delta").load(path)
    assert sorted(map(str, back.collect())) == sorted(map(str, expected.collect()))
    assert back.collect()[0]["group" if table != "topics" else "topic"] in ("g", "t")


def test_an_empty_frame_has_the_schema_and_no_rows(spark):
    frame = rows_frame(spark, [], OFFSET_SCHEMA)
    assert frame.count() == 0 and frame.schema == spark.createDataFrame([], OFFSET_SCHEMA).schema


def test_a_value_that_does_not_fit_its_column_is_refused(spark):
    import pyarrow as pa

    _schema, rows = CASES["offset_commits"]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        rows_frame(spark, [{**rows[0], "partition": "two"}], OFFSET_SCHEMA)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        rows_frame(spark, [{**rows[0], "partition": 2**40}], OFFSET_SCHEMA)
