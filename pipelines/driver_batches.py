"""A small produce's rows in the driver: brought there as Arrow once, numbered and partitioned by
pyarrow and Python, and appended with ``TopicLog.append_rows`` (the path ``lakelog serve``'s
group commit takes), so a 100-record produce runs no Spark job of its own. Where delta-rs commits
(a local or S3 root), rows held as Arrow (``lakelog produce``'s file, ``lakelog serve``'s group
commit) make no py4j call at all; a DataFrame's rows come out of the JVM once, as Arrow.

Only batches whose columns mean here what the Spark path makes of them: ``key`` and ``value`` as
bytes or text (UTF-8), ``timestamp`` as a timestamp, ``headers`` as the log keeps them, and no
``partition``; any other batch takes the Spark path (``Producer.normalize``), which converts other
types as Spark casts them."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from log_store.errors import NO_SEQUENCE, InvalidRecordError
from log_store.partitioner import partitions_for

# The log's headers (``log_store.headers.HEADERS_TYPE``): Kafka's list of (key, value) pairs.
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TEXT = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string, pa.types.is_large_string, pa.types.is_null)


def is_plain(schema: pa.Schema) -> bool:
    """True if every column of ``schema`` is one the driver's path takes as the Spark path would."""
    kinds = {f.name: f.type for f in schema}
    if "value" not in kinds or set(kinds) - {"key", "value", "timestamp", "sequence", "headers"}:
        return False
    if "headers" in kinds and not (pa.types.is_null(kinds["headers"]) or kinds["headers"] == HEADERS):
        return False
    text = all(any(test(kinds[c]) for test in _TEXT) for c in ("key", "value") if c in kinds)
    # an instant: a timestamp without a zone (Spark's TIMESTAMP_NTZ) is read in the session's zone there
    stamp = ("timestamp" not in kinds or pa.types.is_null(kinds["timestamp"])
             or (pa.types.is_timestamp(kinds["timestamp"]) and kinds["timestamp"].tz is not None))
    sequence = "sequence" not in kinds or pa.types.is_integer(kinds["sequence"])
    return text and stamp and sequence


def spark_is_plain(schema) -> bool:
    """``is_plain`` of a Spark schema (False for one Arrow cannot carry)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return is_plain(to_arrow_schema(schema, timezone="UTC"))
    except Exception:  # a type Arrow has no counterpart for
        return False


def normalized(rows: pa.Table, sequence_start: int, producer_id: str, now: datetime | None = None) -> pa.Table:
    """``rows`` (``is_plain``; ``sequence`` each row's place) as the log's producer columns
    without ``partition``: key and value as bytes, a missing timestamp the produce's time (as
    Kafka's producer stamps a record sent without one), sequences from ``sequence_start``; a null
    value stays null (a tombstone). A record with a null sequence is refused, nothing written."""
    n = rows.num_rows
    value = rows.column("value")
    if rows.column("sequence").null_count:  # the caller's own column (a row's place is never null)
        raise InvalidRecordError(f"{rows.column('sequence').null_count} {NO_SEQUENCE}")
    key = rows.column("key").cast(pa.binary()) if "key" in rows.column_names else pa.nulls(n, pa.binary())
    stamp = pa.scalar(now or datetime.now(timezone.utc), pa.timestamp("us", tz="UTC"))
    timestamp = (pc.fill_null(rows.column("timestamp").cast(pa.timestamp("us", tz="UTC")), stamp)
                 if "timestamp" in rows.column_names else pa.array([stamp.as_py()] * n, pa.timestamp("us", tz="UTC")))
    sequence = pc.add(rows.column("sequence").cast(pa.int64()), pa.scalar(sequence_start, pa.int64()))
    return pa.table({
        "key": key, "value": value.cast(pa.binary()),
        "headers": rows.column("headers").cast(HEADERS) if "headers" in rows.column_names else pa.nulls(n, HEADERS),
        "timestamp": timestamp,
        "producer_id": pa.array([producer_id] * n, pa.string()), "sequence": sequence,
    })


def partitioned(rows: pa.Table, count: int) -> pa.Table:
    """``normalized`` rows with each one's ``partition`` among ``count``: its key's, or its sequence's."""
    parts = partitions_for(rows.column("key").to_pylist(), rows.column("sequence").to_pylist(), count)
    return rows.append_column("partition", pa.array(parts, pa.int32()))
