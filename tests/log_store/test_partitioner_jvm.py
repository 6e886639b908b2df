"""Kafka's partitioner in the JVM (``lakelog_partition``, built by ``make setup``) puts every key
where kafka-python's murmur2 does, and unkeyed records where the sequence says."""

import random

from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from log_store.partitioner import JVM_FUNCTION, jvm_partitioner, unavailable_reason, partition_column, partition_for, partition_for_unkeyed


def test_the_jvm_partitioner_agrees_with_kafka_python_on_random_keys(spark):
    assert jvm_partitioner(spark), f"lakelog_partition: {unavailable_reason(spark, JVM_FUNCTION)} (run `make setup`)"
    rng = random.Random(7)
    rows = [(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))), i) for i in range(3000)]
    rows += [(None, i) for i in range(3000, 3050)] + [(b"", 1), ("ключ".encode(), 2), (b"\xff" * 7, 3)]
    df = spark.createDataFrame(rows, StructType([StructField("key", BinaryType()), StructField("sequence", LongType())]))
    for n in (1, 3, 8, 64, 10_000):
        got = df.select("key", "sequence", partition_column(spark, "key", "sequence", n).alias("p")).collect()
        want = [partition_for(r["key"], n) if r["key"] is not None else partition_for_unkeyed(r["sequence"], n) for r in got]
        assert [r["p"] for r in got] == want, f"disagreement over {n} partitions"


def test_the_pandas_fallback_agrees_with_kafka_python(spark):
    """Where the jar is not on the classpath, the pandas UDF (built on first use) partitions the same."""
    from log_store.partitioner import _pandas_partition

    rng = random.Random(11)
    rows = [(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 20))), i) for i in range(500)] + [(None, 7)]
    df = spark.createDataFrame(rows, StructType([StructField("key", BinaryType()), StructField("sequence", LongType())]))
    got = df.select("key", "sequence", _pandas_partition()("key", "sequence", F.lit(8)).alias("p")).collect()
    want = [partition_for(r["key"], 8) if r["key"] is not None else partition_for_unkeyed(r["sequence"], 8) for r in got]
    assert [r["p"] for r in got] == want
