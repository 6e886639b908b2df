"""A Delta table's history, details and existence through Spark SQL (``DESCRIBE HISTORY``,
``DESCRIBE DETAIL``): the same on a classic session and on Spark Connect, where delta-spark's
``DeltaTable`` needs the server to run Delta's Connect plugin as well."""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession


def table_ref(path: str) -> str:
    """The table at ``path`` as Spark SQL names it (``delta.`path```, a backtick in it doubled)."""
    return "delta.`" + path.replace("`", "``") + "`"


def history(spark: SparkSession, path: str) -> DataFrame:
    """The table's commits still in its log (version, operation, userMetadata, ...), newest first."""
    return spark.sql(f"DESCRIBE HISTORY {table_ref(path)}")


def properties(spark: SparkSession, path: str) -> dict[str, str]:
    """The table's properties."""
    return spark.sql(f"DESCRIBE DETAIL {table_ref(path)}").select("properties").first()["properties"] or {}


def is_delta_table(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table is at ``path`` (as ``DeltaTable.isDeltaTable``)."""
    try:
        found = spark.sql(f"DESCRIBE DETAIL {table_ref(path)}").select("format").first()
    except AnalysisException:
        return False
    return found is not None and found["format"] == "delta"
