"""A small produce's rows in the driver (pipelines.driver_batches): which batches take that path,
and that they come out as the Spark path makes them (bytes, a time for each record, sequences from
the start, each key's Kafka partition)."""

from datetime import datetime, timezone

import pyarrow as pa

from log_store.partitioner import partition_for, partition_for_unkeyed
from pipelines.driver_batches import HEADERS, is_plain, normalized, partitioned, spark_is_plain


def batch(**columns):
    n = len(next(iter(columns.values())))
    return pa.table({**columns, "sequence": pa.array(range(n), pa.int64())})


def test_only_batches_whose_columns_mean_the_same_in_both_paths_are_plain():
    assert is_plain(batch(key=["a"], value=[b"x"]).schema)
    assert is_plain(batch(value=["x"], timestamp=pa.array([datetime.now(timezone.utc)], pa.timestamp("us", tz="UTC"))).schema)
    assert not is_plain(batch(key=["a"]).schema)  # no value: the Spark path says what is missing
    assert not is_plain(batch(key=[1], value=["x"]).schema)  # a number as text is Spark's cast
    assert not is_plain(batch(value=["x"], partition=[0]).schema)
    assert is_plain(batch(value=["x"], headers=[None]).schema)  # none: as the Spark path leaves them
    assert is_plain(batch(value=["x"], headers=pa.array([[{"key": "h", "value": b"v"}]], HEADERS)).schema)
    assert not is_plain(batch(value=["x"], headers=[{"h": "v"}]).schema)  # a map: the Spark path converts it
    # a timestamp without a zone is read in the Spark session's zone by the Spark path
    assert not is_plain(batch(value=["x"], timestamp=pa.array([datetime(2026, 1, 1)], pa.timestamp("us"))).schema)


def test_spark_schemas_are_judged_by_the_same_rule():
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    assert spark_is_plain(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    assert not spark_is_plain(StructType([StructField("value", IntegerType())]))


def test_rows_become_bytes_stamped_and_numbered_from_the_start():
    now = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
    given = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = normalized(batch(key=["k", None], value=["v", "w"],
                           timestamp=pa.array([given, None], pa.timestamp("us", tz="UTC"))), 10, "p", now)
    assert out.column("key").to_pylist() == [b"k", None]
    assert out.column("value").to_pylist() == [b"v", b"w"]
    assert out.column("timestamp").to_pylist() == [given, now]  # a record without one gets the produce's time
    assert out.column("sequence").to_pylist() == [10, 11]
    assert out.column("producer_id").to_pylist() == ["p", "p"]


def test_a_null_value_stays_null_and_an_empty_one_empty():
    """A tombstone is the log's to keep or refuse (``log_append``), not the batch's."""
    assert normalized(batch(value=["v", None, ""]), 0, "p").column("value").to_pylist() == [b"v", None, b""]


def test_keyed_records_go_where_kafka_puts_their_key_and_unkeyed_ones_by_sequence():
    out = partitioned(normalized(batch(key=["a", None, "b", None], value=["1", "2", "3", "4"]), 5, "p"), 3)
    assert out.column("partition").to_pylist() == [partition_for(b"a", 3), partition_for_unkeyed(6, 3),
                                                   partition_for(b"b", 3), partition_for_unkeyed(8, 3)]


def test_headers_in_the_logs_form_are_kept_as_given():
    headers = pa.array([[{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}], None], HEADERS)
    out = normalized(batch(value=["v", "w"], headers=headers, sequence=[0, 1]), 0, "p")
    assert out.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}], None]
    assert normalized(batch(value=["v"], sequence=[0]), 0, "p").column("headers").to_pylist() == [None]
