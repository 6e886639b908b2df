"""Kafka's default partitioner, exactly: ``murmur2(key) & 0x7fffffff % num_partitions``.

Two implementations that must agree, number for number: ``partition_for`` in Python (the hash from
kafka-python, a well-kept implementation of Kafka's murmur2) for rules and tests, and
``partition_column`` for producing: the JVM function ``lakelog_partition`` (``log_store/jvm``,
built by ``make setup``) when it is on the classpath, so keys never travel to Python and back;
otherwise a pandas UDF over ``partition_for``. Both through Spark's public API
(``registerJavaFunction``), so on Spark Connect too where the server has lakelog's jar; a platform
that allows no jar gets the pandas UDF. ``tests/log_store/test_partitioner_jvm.py``
cross-checks them on random keys. Registered here too, the same way: ``lakelog_offset_index``,
the per-task row counter behind offsets without a shuffle (log_store/dense_offsets.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import IntegerType

from log_store.errors import InvalidPartitionMetadataError
from log_store.session import is_connect

JVM_FUNCTION = "lakelog_partition"
JVM_CLASS = "lakelog.KafkaPartition"
OFFSET_INDEX_FUNCTION = "lakelog_offset_index"
OFFSET_INDEX_CLASS = "lakelog.OffsetIndex"
_log = logging.getLogger("lakelog.partitioner")


@lru_cache(maxsize=262_144)
def _positive_hash(key: bytes) -> int:
    from kafka.partitioner.default import murmur2  # kafka-python's package costs 0.17 s to import: when needed

    return murmur2(key) & 0x7FFFFFFF


def partition_for(key: bytes, num_partitions: int) -> int:
    """Partition of a keyed record among ``num_partitions`` undeleted partitions."""
    if num_partitions < 1:
        raise InvalidPartitionMetadataError(
            f"cannot partition over {num_partitions} partitions; a topic has at least 1"
        )
    return _positive_hash(bytes(key)) % num_partitions


def partition_for_unkeyed(sequence: int, num_partitions: int) -> int:
    """Unkeyed records spread round-robin by their sequence over the undeleted partitions."""
    return sequence % num_partitions


def partitions_for(keys, sequences, num_partitions: int) -> list[int]:
    """Each record's partition: its key's, or (unkeyed) its sequence's, as ``partition_column``."""
    if num_partitions < 1:
        raise InvalidPartitionMetadataError(f"cannot partition over {num_partitions} partitions; a topic has at least 1")
    return [partition_for(k, num_partitions) if k is not None else partition_for_unkeyed(int(s), num_partitions)
            for k, s in zip(keys, sequences)]


@lru_cache(maxsize=2)
def _pandas_partition(connect: bool = False):
    """The pandas UDF fallback, built on first use: importing pandas costs the JVM-free read
    commands, which import this module, more than half a second. One per kind of session
    (``connect``): PySpark makes a UDF for the kind its process runs (``is_remote``) as it is built."""
    import pandas as pd

    def partitions(keys, sequences, counts):
        return pd.Series(partitions_for(keys, sequences, int(counts.iloc[0])), dtype="int32")

    partitions.__annotations__ = {"keys": pd.Series, "sequences": pd.Series, "counts": pd.Series, "return": pd.Series}
    # Marked non-deterministic only so that Spark evaluates it once per row: otherwise the optimizer
    # copies it into every expression that uses ``partition`` (filter, window, offset lookups).
    return pandas_udf(partitions, IntegerType()).asNondeterministic()


def _register_once(spark: SparkSession, name: str, register: Callable[[], None], instead: str) -> bool:
    """Register one of lakelog's JVM functions in this session, once; False if its jar is absent.

    The outcome is kept on the session object itself (not by ``id(spark)``, which a later
    session may reuse), with the reason when it failed (``unavailable_reason``)."""
    known = spark.__dict__.setdefault("_lakelog_functions", {})
    if name not in known:
        try:
            register()
            known[name] = None
        except Exception as exc:  # the jar is not on this cluster's classpath: the fallback computes the same
            reason = " ".join(str(exc).split())[:400] or type(exc).__name__
            _log.info("%s is not available (%s); %s", name, reason, instead)
            known[name] = reason
    return known[name] is None


def unavailable_reason(spark: SparkSession, name: str) -> str | None:
    """Why ``name`` could not be registered in this session (None: registered, or not tried)."""
    return spark.__dict__.get("_lakelog_functions", {}).get(name)


def _jvm_instance(spark: SparkSession, class_name: str):
    """A new instance of one of lakelog's JVM classes, loaded by Spark's class loader (the one
    ``registerJavaFunction`` uses, which sees ``spark.jars``), not py4j's thread's loader."""
    jvm = spark._jvm
    return jvm.org.apache.spark.util.Utils.classForName(class_name, True, False).newInstance()


def jvm_partitioner(spark: SparkSession) -> bool:
    """Register ``lakelog_partition`` in this session if its class is on the classpath."""
    return _register_once(spark, JVM_FUNCTION, lambda: spark.udf.registerJavaFunction(JVM_FUNCTION, JVM_CLASS, IntegerType()),
                          "partitioning in a pandas UDF")


def jvm_offset_index(spark: SparkSession) -> bool:
    """Register ``lakelog_offset_index`` (``lakelog.OffsetIndex``, log_store/dense_offsets.py),
    non-deterministic so that Spark evaluates it once per row, in input order."""
    def register() -> None:
        # functions.udf(UDF2, DataType), chosen by reflection: py4j may pick the untyped
        # udf(Object, DataType) overload instead, which Spark refuses (UNTYPED_SCALA_UDF), and did
        # in some JVM runs.
        jvm, gw = spark._jvm, spark.sparkContext._gateway
        load = jvm.org.apache.spark.util.Utils.classForName
        types = gw.new_array(jvm.java.lang.Class, 2)
        types[0], types[1] = load("org.apache.spark.sql.api.java.UDF2", True, False), \
            load("org.apache.spark.sql.types.DataType", True, False)
        args = gw.new_array(jvm.java.lang.Object, 2)
        args[0], args[1] = _jvm_instance(spark, OFFSET_INDEX_CLASS), jvm.org.apache.spark.sql.types.DataTypes.LongType
        fn = load("org.apache.spark.sql.functions", True, False).getMethod("udf", types).invoke(None, args)
        spark._jsparkSession.udf().register(OFFSET_INDEX_FUNCTION, fn.asNondeterministic())
    if is_connect(spark):  # it must be non-deterministic, which only the JVM's own API makes it
        spark.__dict__.setdefault("_lakelog_functions", {})[OFFSET_INDEX_FUNCTION] = \
            "Spark Connect registers Java functions as deterministic only"
        return False
    return _register_once(spark, OFFSET_INDEX_FUNCTION, register, "numbering offsets with a sorting window")


def partition_column(spark: SparkSession, key: str, sequence: str, num_partitions: int) -> Column:
    """Each row's partition among ``num_partitions``, from its key (or, unkeyed, its sequence)."""
    if num_partitions < 1:
        raise InvalidPartitionMetadataError(f"cannot partition over {num_partitions} partitions; a topic has at least 1")
    if jvm_partitioner(spark):
        return F.call_function(JVM_FUNCTION, F.col(key), F.col(sequence).cast("long"), F.lit(num_partitions))
    return _pandas_partition(is_connect(spark))(key, sequence, F.lit(num_partitions))
