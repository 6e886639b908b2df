"""lakelog's Python APIs on a Spark Connect session (a gRPC client with no JVM in this process) and
on a classic one: the same calls, checked with delta-rs rather than with lakelog's own reads.

The Connect server runs in a process of its own (``log_store/connect_server.py``, the ``connect_server``
fixture): PySpark starts a local one only where no classic session exists in the process, and the
classic one of the test run does.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from control_plane.controller import TopicController
from control_plane.settings import ControllerSettings, GroupSettings
from control_plane.topics import TopicAdmin
from pipelines.audit import run_audit
from pipelines.consumer import Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings
from tests.support import log_rows

KEYS = 50
BIG = 100_000

def _records(spark, first: int, n: int):
    """``n`` local rows produced in order: value = the global production index, key = index % KEYS."""
    return spark.createDataFrame([{"key": f"k{i % KEYS}", "value": str(i)} for i in range(first, first + n)])


def _big(spark, first: int, n: int):
    """``n`` rows of a Spark job (a range), in the same form."""
    ids = spark.range(first, first + n)
    return ids.select(F.concat(F.lit("k"), (F.col("id") % KEYS).cast("string")).alias("key"),
                      F.col("id").cast("string").alias("value"))


def _check_order(rows: list[dict], produced: int, what: str) -> None:
    """Every production index once, and each key's records, in each partition, in offset order."""
    values = sorted(int(bytes(r["value"]).decode()) for r in rows)
    assert values == list(range(produced)), f"{what}: {len(values)} rows, not each of {produced} once"
    by_place: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        by_place[(bytes(r["key"]), r["partition"])].append((r["offset"], int(bytes(r["value"]).decode())))
    for place, found in by_place.items():
        in_offsets = [v for _o, v in sorted(found)]
        assert in_offsets == sorted(in_offsets), f"{what}: key {place[0]!r} out of order in partition {place[1]}"


def test_topic_produce_resize_consume_audit(session_of_kind, root, tmp_path):
    """Create, small and large sends, a resize, another send, a group into a Delta sink, the audit."""
    from log_store.session import is_connect

    spark = session_of_kind
    kind = "connect" if is_connect(spark) else "classic"
    admin = TopicAdmin(spark, root)
    admin.create("orders", 2)
    assert admin.describe("orders").partition_count == 2
    producer = Producer(spark, root, "orders", "p")

    started = time.perf_counter()
    first = producer.send(_records(spark, 0, 100))
    print(f"\n{kind}: 100 local rows sent in {time.perf_counter() - started:.2f} s")
    assert first.appended == 100
    big = _big(spark, 100, BIG)
    # a filter of a DataFrame that leaves few rows: a small send
    assert producer.send(big.where(F.col("value").cast("long") < 150)).appended == 50
    started = time.perf_counter()
    assert producer.send(big.where(F.col("value").cast("long") >= 150)).appended == BIG - 50
    print(f"{kind}: {BIG - 50} rows of a Spark job sent in {time.perf_counter() - started:.2f} s")

    TopicController(spark, root, ControllerSettings()).alter("orders", 4)
    assert admin.describe("orders").partition_count == 4
    started = time.perf_counter()
    assert producer.send(_records(spark, 100 + BIG, 100)).appended == 100
    print(f"{kind}: 100 local rows sent again in {time.perf_counter() - started:.2f} s")
    produced = 200 + BIG
    _check_order(log_rows(root, "orders"), produced, f"{kind} log")

    sink = f"{root}/sinks/g"
    member = GroupConsumer(spark, root, "orders", "g", ConsumerSettings(),
                           GroupSettings(session_timeout_ms=30_000, heartbeat_interval_ms=1000), "m1")
    result = member.run(sink_path=sink, max_records=produced, idle_timeout_s=5)
    assert result.records == produced
    rows = DeltaTable(sink).to_pyarrow_table().to_pylist()
    assert {r["topic"] for r in rows} == {"orders"}
    _check_order(rows, produced, f"{kind} group sink")

    alone = f"{root}/sinks/alone"
    assert Consumer(spark, root, "orders", "alone").run_to_sink(alone).records == produced
    _check_order(DeltaTable(alone).to_pyarrow_table().to_pylist(), produced, f"{kind} consumer sink")

    report = run_audit(spark, root, "orders", sink, str(tmp_path / "audit.md"), group="g")
    assert report.passed, Path(report.report_path).read_text()
    assert all(c.violations == 0 for c in report.checks) and len(report.checks) == 7


def test_partitioners_agree_with_kafka_python(session_of_kind):
    """Kafka's partitioner as lakelog's Java function (registered through Spark's public API) where
    the server has lakelog's jar (the classic session), and as the pandas UDF where it has not (the
    Connect server, as serverless runs): both give kafka-python's partitions."""
    import random

    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from log_store.partitioner import (
        JVM_FUNCTION, jvm_partitioner, partition_column, partition_for, partition_for_unkeyed, unavailable_reason,
    )

    spark = session_of_kind
    from log_store.session import is_connect

    if is_connect(spark):
        assert not jvm_partitioner(spark) and "KafkaPartition" in unavailable_reason(spark, JVM_FUNCTION)
    else:
        assert jvm_partitioner(spark), unavailable_reason(spark, JVM_FUNCTION)
    rng = random.Random(5)
    rows = [(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 20))), i) for i in range(300)] + [(None, 7)]
    df = spark.createDataFrame(rows, StructType([StructField("key", BinaryType()), StructField("sequence", LongType())]))
    columns = {"chosen": partition_column(spark, "key", "sequence", 8)}
    if not is_connect(spark):
        known = spark.__dict__["_lakelog_functions"]
        known[JVM_FUNCTION] = "left out by the test"  # as on a server without lakelog's jar
        try:
            columns["pandas"] = partition_column(spark, "key", "sequence", 8)
        finally:
            known[JVM_FUNCTION] = None
    got = df.select("key", "sequence", *(c.alias(name) for name, c in columns.items())).collect()
    want = [partition_for(r["key"], 8) if r["key"] is not None else partition_for_unkeyed(r["sequence"], 8) for r in got]
    for name in columns:
        assert [r[name] for r in got] == want, name
