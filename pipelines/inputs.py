"""Reading producer input (JSON Lines or Parquet) into validated records.

Every line is checked before anything is written: a malformed line, a non-object, a missing
value or a bad timestamp is reported with its line number and nothing is produced.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from log_store.files import is_remote
from log_store.errors import InvalidRecordError

JSON_SCHEMA = "key STRING, value STRING, headers MAP<STRING, STRING>, timestamp STRING, _corrupt STRING"
_JSON_SUFFIXES = {".jsonl", ".json", ".ndjson"}
MAX_REPORTED = 5


def _check_readable(path: str) -> Path:
    """Fail early on a missing or unreadable local file (remote paths are left to Spark)."""
    p = Path(path)
    if is_remote(path):
        return p
    if not p.exists():
        raise InvalidRecordError(f"input file {path} does not exist")
    if not os.access(p, os.R_OK) or (p.is_dir() and not os.access(p, os.X_OK)):
        raise InvalidRecordError(f"input file {path} is not readable (permission denied)")
    if p.is_file():
        try:
            with p.open("rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise InvalidRecordError(f"input file {path} cannot be read: {exc.strerror}") from exc
    return p


def _timestamp(col: Column) -> Column:
    """Epoch milliseconds (Kafka's form) or an ISO-8601 string."""
    # try_*: an unparsable value is null (reported as a bad timestamp), also under ANSI mode.
    return F.when(col.rlike(r"^-?\d+$"), F.timestamp_millis(col.try_cast("long"))).otherwise(F.try_to_timestamp(col))


def read_json_lines(spark: SparkSession, path: str) -> DataFrame:
    """Records with ``line`` (1-based), key/value/headers as binary, timestamp; validated."""
    if _check_readable(path).is_dir():
        raise InvalidRecordError(f"input {path} is a directory and cannot be read as JSON Lines; pass a file")
    text = spark.read.text(path).withColumn("_order", F.monotonically_increasing_id())
    text = text.withColumn("line", F.row_number().over(Window.orderBy("_order")))
    text = text.where(F.trim("value") != "")
    parsed = text.select(
        "line",
        F.col("value").alias("_raw"),
        F.from_json("value", JSON_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt", "mode": "PERMISSIVE"}).alias("r"),
    )
    is_object = F.trim("_raw").startswith("{")
    ts = _timestamp(F.col("r.timestamp"))
    error = (
        F.when(~is_object | F.col("r._corrupt").isNotNull() | F.col("r").isNull(), F.lit("malformed JSON object"))
        .when(F.col("r.value").isNull(), F.lit("record has no 'value'"))
        .when(F.col("r.timestamp").isNotNull() & ts.isNull(), F.concat(F.lit("bad timestamp "), F.col("r.timestamp")))
    )
    checked = parsed.withColumn("_error", error).persist()
    bad = checked.where(F.col("_error").isNotNull()).orderBy("line").limit(MAX_REPORTED).collect()
    if bad:
        checked.unpersist()
        where = "; ".join(f"line {r['line']}: {r['_error']}" for r in bad)
        raise InvalidRecordError(
            f"{path}: {where}. Each line must be a JSON object with 'key' (string or null), 'value', "
            "optional 'headers' (object of strings) and 'timestamp' (epoch ms or ISO-8601). Nothing was produced."
        )
    return checked.select(
        (F.col("line") - 1).cast("long").alias("sequence"),
        F.col("r.key").cast("binary").alias("key"),
        F.col("r.value").cast("binary").alias("value"),
        F.transform_values("r.headers", lambda _k, v: v.cast("binary")).alias("headers"),
        ts.alias("timestamp"),
    )


def read_parquet(spark: SparkSession, path: str) -> DataFrame:
    _check_readable(path)
    df = spark.read.parquet(path)
    if "value" not in df.columns:
        raise InvalidRecordError(f"{path}: Parquet input needs a 'value' column; found {df.columns}")
    return df


def read_input(spark: SparkSession, path: str) -> DataFrame:
    """Read a produce input file by its suffix (.jsonl/.json/.ndjson or .parquet)."""
    suffix = Path(path).suffix.lower()
    if suffix in _JSON_SUFFIXES:
        return read_json_lines(spark, path)
    if suffix == ".parquet" or Path(path).is_dir():
        return read_parquet(spark, path)
    raise InvalidRecordError(f"{path}: unknown input format '{suffix}'; use .jsonl (JSON Lines) or .parquet")
