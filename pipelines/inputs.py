"""Reading producer input (JSON Lines or Parquet) into validated records.

Every line is checked before anything is written: a malformed line, a non-object, a missing
value or a bad timestamp is reported with its line number and nothing is produced.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

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
        # "value": null is a null value (a tombstone); a record without the field is a mistake
        .when(~F.array_contains(F.json_object_keys("_raw"), "value"), F.lit("record has no 'value'"))
        .when(F.col("r.timestamp").isNotNull() & ts.isNull(), F.concat(F.lit("bad timestamp "), F.col("r.timestamp")))
    )
    checked = parsed.withColumn("_error", error).persist()
    bad = checked.where(F.col("_error").isNotNull()).orderBy("line").limit(MAX_REPORTED).collect()
    if bad:
        checked.unpersist()
        _refuse(path, [(r["line"], r["_error"]) for r in bad])
    return checked.select(
        (F.col("line") - 1).cast("long").alias("sequence"),
        F.col("r.key").cast("binary").alias("key"),
        F.col("r.value").cast("binary").alias("value"),
        F.transform_values("r.headers", lambda _k, v: v.cast("binary")).alias("headers"),
        ts.alias("timestamp"),
    )


def _refuse(path: str, bad: list[tuple[int, str]]) -> None:
    where = "; ".join(f"line {line}: {error}" for line, error in bad[:MAX_REPORTED])
    raise InvalidRecordError(
        f"{path}: {where}. Each line must be a JSON object with 'key' (string or null), 'value' (null: a tombstone), "
        "optional 'headers' (object of strings) and 'timestamp' (epoch ms or ISO-8601). Nothing was produced."
    )


def _text(value) -> str | None:
    """A JSON value read into a STRING field, as Spark's JSON reader makes it (a string as it is,
    anything else as its compact JSON text)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_MILLIS = re.compile(r"-?[0-9]+")
# The dates Spark's timestamp parser takes that Python's ISO parser does not: a year, a year and a
# month, or a date with one-digit month or day (``2024``, ``2024-01``, ``2024-1-5``).
_SHORT_DATE = re.compile(r"([0-9]{4})(?:-([0-9]{1,2}))?(?:-([0-9]{1,2}))?")


def _instant(text: str) -> datetime | None:
    """Epoch milliseconds or an ISO-8601 time (UTC without a zone), as the Spark reader takes them;
    None if neither."""
    try:
        if _MILLIS.fullmatch(text):
            return datetime.fromtimestamp(int(text) / 1000, timezone.utc)
        short = _SHORT_DATE.fullmatch(text.strip(" "))
        if short:
            year, month, day = (int(g) if g else 1 for g in short.groups())
            stamp = datetime(year, month, day)
        elif "W" in text or not text[:4].isascii():  # ISO week dates: Python takes them, Spark does not
            return None
        else:
            stamp = datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        return None
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp.astimezone(timezone.utc)


LOCAL_RECORD_TYPES = pa.schema([
    ("key", pa.string()), ("value", pa.string()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("sequence", pa.int64()),
])


def read_local_json_lines(path: str, limit: int) -> pa.Table | None:
    """The records of a local JSON Lines file of at most ``limit`` records, read and checked in
    Python as ``read_json_lines`` reads and checks them in Spark (same columns, same errors), so a
    small produce starts no JVM; None for a larger file (Spark reads it)."""
    if _check_readable(path).is_dir():
        raise InvalidRecordError(f"input {path} is a directory and cannot be read as JSON Lines; pass a file")
    rows, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line, raw in enumerate(fh, start=1):
            text = raw.rstrip("\r\n").strip(" ")  # Spark's trim: spaces only
            if not text:
                continue
            if len(rows) + len(bad) >= limit:
                return None
            try:
                record = json.loads(text) if text.startswith("{") else None
            except ValueError:
                record = None
            if not isinstance(record, dict):
                bad.append((line, "malformed JSON object"))
                continue
            headers = record.get("headers")
            if headers is not None and not isinstance(headers, dict):
                bad.append((line, "malformed JSON object"))
                continue
            if "value" not in record:
                bad.append((line, "record has no 'value'"))
                continue
            stamp_text = _text(record.get("timestamp"))
            stamp = None if stamp_text is None else _instant(stamp_text)
            if stamp_text is not None and stamp is None:
                bad.append((line, f"bad timestamp {stamp_text}"))
                continue
            rows.append({"key": _text(record.get("key")), "value": _text(record["value"]),  # null: a tombstone
                         "headers": None if headers is None else [
                             {"key": k, "value": None if v is None else _text(v).encode()} for k, v in headers.items()],
                         "timestamp": stamp, "sequence": line - 1})
    if bad:
        _refuse(path, bad)
    return pa.Table.from_pylist(rows, schema=LOCAL_RECORD_TYPES)


def read_local_input(path: str, limit: int) -> pa.Table | None:
    """A local input file of at most ``limit`` records as Arrow, read without Spark (JSON Lines
    as ``read_local_json_lines``; Parquet as its columns are); None where Spark reads it (a
    larger file, a remote one, a folder)."""
    if is_remote(path) or Path(path).is_dir():
        return None
    suffix = Path(path).suffix.lower()
    if suffix in _JSON_SUFFIXES:
        return read_local_json_lines(path, limit)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        _check_readable(path)
        try:
            if pq.ParquetFile(path).metadata.num_rows > limit:
                return None
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise InvalidRecordError(f"{path}: not a readable Parquet file ({exc}); nothing was produced") from exc
        if "value" not in table.column_names:
            raise InvalidRecordError(f"{path}: Parquet input needs a 'value' column; found {table.column_names}")
        return table
    raise InvalidRecordError(f"{path}: unknown input format '{suffix}'; use .jsonl (JSON Lines) or .parquet")


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
