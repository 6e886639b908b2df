"""DataFrames of a few rows made in Python, sent to the JVM through Arrow.

``spark.createDataFrame(rows, schema)`` on a list pickles the rows and converts them in Spark's
Python worker processes: a Spark job of four tasks, each starting a worker that re-reads the zip
directories on its path (about 0.6 s on 2 cores). Every control-plane write (an offsets commit,
a claim, a generation, a topic change) built one. From an Arrow table the rows go to the JVM
directly (about 0.03 s): BENCHMARKS.md, 2026-11-24.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from threading import Lock

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from log_store.ddl import parse_columns
from log_store.session import is_connect

_SCHEMAS: dict[str, tuple[StructType, pa.Schema]] = {}
_LOCK = Lock()


def _schemas(spark: SparkSession | None, schema: str | StructType) -> tuple[StructType, pa.Schema]:
    """The Spark and Arrow forms of ``schema`` (a DDL string is parsed once per process)."""
    if isinstance(schema, StructType):
        return schema, _arrow_schema(schema)
    with _LOCK:
        if schema not in _SCHEMAS:
            struct = parse_columns(schema)  # as Spark parses it, without a session
            _SCHEMAS[schema] = (struct, _arrow_schema(struct))
        return _SCHEMAS[schema]


def _arrow_schema(struct: StructType) -> pa.Schema:
    """Spark's Arrow form of ``struct``; a TIMESTAMP (an instant) as microseconds in UTC."""
    return to_arrow_schema(struct, timezone="UTC")


def struct_of(spark: SparkSession, schema: str | StructType) -> StructType:
    """``schema`` as a StructType (a DDL string parsed once per process)."""
    return _schemas(spark, schema)[0]


def arrow_rows(spark: SparkSession, rows: Iterable[dict], schema: str | StructType) -> pa.Table:
    """``rows`` (dicts by column name; nested structs as dicts, maps as dicts, naive datetimes for
    TIMESTAMP_NTZ) as an Arrow table of exactly ``schema``. A value that does not fit its column
    raises (pyarrow's ArrowInvalid or ArrowTypeError), as Spark's own check did."""
    return pa.Table.from_pylist(list(rows), schema=_schemas(spark, schema)[1])


def rows_frame(spark: SparkSession, rows: Iterable[dict], schema: str | StructType) -> DataFrame:
    """A DataFrame of ``rows`` with exactly ``schema`` (see ``arrow_rows``)."""
    return spark.createDataFrame(arrow_rows(spark, rows, schema), struct_of(spark, schema))


def row_bound(df: DataFrame) -> int | None:
    """At most how many rows ``df`` has, known from its plan without running it (Spark's
    ``maxRows``: defined for local rows, ranges and limits, not for files or RDDs), else None.
    None on Spark Connect, whose client sees no optimized plan: callers then look at the rows
    themselves (a ``limit`` job)."""
    if is_connect(df):
        return None
    bound = df._jdf.queryExecution().optimizedPlan().maxRows()
    return int(bound.get()) if bound.isDefined() else None


def deterministic(df: DataFrame) -> bool:
    """Whether ``df``'s plan reads the same rows each time it runs (no random or changing
    expressions); False where that cannot be known (Spark Connect: no analyzed plan in the client)."""
    if is_connect(df):
        return False
    return bool(df._jdf.queryExecution().analyzed().deterministic())


def cached_rows(df: DataFrame) -> int | None:
    """How many rows ``df`` has if it is a cached DataFrame whose cache is filled (Spark counts
    rows as it fills a cache: ``persist`` then ``count``), else None. Not before the cache is
    filled: Spark then reports its estimate for the plan underneath. None on Spark Connect."""
    if is_connect(df):
        return None
    plan = df._jdf.queryExecution().optimizedPlan()
    if plan.nodeName() != "InMemoryRelation" or not plan.cacheBuilder().isCachedColumnBuffersLoaded():
        return None
    count = plan.computeStats().rowCount()
    return int(count.get()) if count.isDefined() else None  # a BigInt, which py4j hands over as int


def observed(observation: Observation, fallback: Callable[[], dict], wait_s: float = 30.0) -> dict:
    """The metrics ``observation`` collected in an action that has run, or ``fallback()`` if they
    have not arrived within ``wait_s``: Spark hands them over through its listener bus, which
    drops events when its queue overflows, and ``Observation.get`` would then wait forever. On
    Spark Connect the metrics come back with the action's own result."""
    if is_connect(observation):
        try:
            return observation.get or fallback()  # empty: none came back with the result
        except Exception:  # noqa: BLE001 - the server could not collect them
            return fallback()
    future = observation._jo.future()
    deadline = time.monotonic() + wait_s
    pause = 0.001
    while not future.isCompleted():
        if time.monotonic() > deadline:
            return fallback()
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return observation.get


def frame_of(spark: SparkSession, jdf) -> DataFrame:
    """A DataFrame of ``spark``'s for a JVM Dataset py4j handed over (as ``foreachBatch`` wraps its
    micro-batches)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    return ClassicFrame(jdf, spark)


def parallelism(spark: SparkSession) -> int:
    """How many tasks a job of ``spark`` runs at once by default: ``spark.default.parallelism``,
    else its shuffle partitions (settings a Spark Connect session has too; its context it has not)."""
    for key in ("spark.default.parallelism", "spark.sql.shuffle.partitions"):
        value = spark.conf.get(key, None)
        if value and str(value).isdigit():
            return max(1, int(value))
    return 2
