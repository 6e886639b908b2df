"""Tables committed through delta-rs (log_store.rs_engine) and through Spark's Delta
(log_store.engine) are one table to both: Spark reads rs_engine's rows, statistics and set
transactions; each engine commits on top of the other, and the fence rejects across them."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from log_store import rs_reader
from log_store.delta_classes import delta, jvm
from log_store.engine import DeltaTransaction
from log_store.errors import AppVersionConflictError, ConcurrentCommitError, InvalidPartitionMetadataError
from log_store.log_metadata import TopicLogMetadata
from log_store.names import log_end_app_id
from log_store.rs_engine import RsTransaction
from log_store.topic_log import TopicLog

END0, END1 = log_end_app_id(0), log_end_app_id(1)
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def records(partition: int, start: int, n: int, epoch: int = 0) -> pa.Table:
    return pa.table({
        "partition": pa.array([partition] * n, pa.int32()), "offset": list(range(start, start + n)),
        "leader_epoch": pa.array([epoch] * n, pa.int32()), "key": [b"k"] * n,
        "value": [f"{partition}:{o}".encode() for o in range(start, start + n)],
        "timestamp": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, "producer_id": ["p"] * n,
        "sequence": list(range(start, start + n)),
    })


def spark_values(spark, path: str) -> list[str]:
    return sorted(bytes(r["value"]).decode() for r in spark.read.format("delta").load(path).select("value").collect())


def rs_append(path: str, partition: int, n: int, tags: dict | None = None) -> int:
    """A fenced append through rs_engine, as lakelog's append will make it: rows at the log end."""
    txn = RsTransaction.start(path)
    end = txn.app_version(log_end_app_id(partition))
    txn.write_rows(records(partition, end, n), tags=tags)
    return txn.commit({log_end_app_id(partition): end + n}, user_metadata='{"lakelog":"test"}')


def spark_append(spark, path: str, partition: int, n: int) -> int:
    txn = DeltaTransaction.start(spark, path)
    end = txn.app_version(log_end_app_id(partition))
    txn.write_rows(records(partition, end, n), partition_by="partition")
    return txn.commit({log_end_app_id(partition): end + n})


@pytest.fixture()
def log(spark, tmp_path) -> str:
    """A topic log of two partitions made by Spark's Delta, as lakelog makes them today."""
    path = str(tmp_path / "log")
    TopicLog.create(spark, path, TopicLogMetadata.initial("t", 2), layout="partitioned")
    return path


def test_spark_reads_rs_engines_commits_and_each_engine_commits_on_top_of_the_other(spark, log):
    version = rs_append(log, 0, 3)
    actions = [json.loads(line) for line in open(f"{log}/_delta_log/{version:020d}.json")]
    assert not [a for a in actions if "metaData" in a or "protocol" in a], "an append changes no metadata"
    assert spark_values(spark, log) == ["0:0", "0:1", "0:2"]
    assert sorted(r["offset"] for r in spark.read.format("delta").load(log).where("offset = 1").collect()) == [1]
    assert TopicLog.for_path(spark, log).log_end_offsets() == {0: 3, 1: 0}

    spark_append(spark, log, 0, 2)  # Spark's engine reads rs_engine's log end and commits on top
    rs_append(log, 1, 1)  # and rs_engine on top of Spark's
    assert spark_append(spark, log, 1, 1) == rs_append(log, 0, 1) - 1  # and back again
    expected = ["0:0", "0:1", "0:2", "0:3", "0:4", "0:5", "1:0", "1:1"]
    assert spark_values(spark, log) == expected
    assert sorted(bytes(r["value"]).decode() for r in rs_reader.rows(log)) == expected
    assert RsTransaction.start(log).snapshot_app_versions() == DeltaTransaction.start(spark, log).snapshot_app_versions()
    assert TopicLog.for_path(spark, log).log_end_offsets() == {0: 6, 1: 2}
    assert RsTransaction.start(log).configuration() == DeltaTransaction.start(spark, log).configuration()
    assert RsTransaction.start(log).table_id() == DeltaTransaction.start(spark, log).table_id()


def test_the_fence_rejects_across_engines_both_ways(spark, log):
    # rs_engine read a log end that Spark's engine then moved
    mine = RsTransaction.start(log)
    mine.app_version(END0)
    mine.write_rows(records(0, 0, 1))
    spark_append(spark, log, 0, 1)
    with pytest.raises(AppVersionConflictError):
        mine.commit({END0: 1})
    # Spark's engine read a log end that rs_engine then moved
    theirs = DeltaTransaction.start(spark, log)
    theirs.app_version(END0)
    theirs.write_rows(records(0, 1, 1), partition_by="partition")
    rs_append(log, 0, 1)
    with pytest.raises(AppVersionConflictError):
        theirs.commit({END0: 2})
    # a metadata change by either engine fences the other's append
    theirs = DeltaTransaction.start(spark, log)
    theirs.app_version(END1)
    theirs.write_rows(records(1, 0, 1), partition_by="partition")
    props = RsTransaction.start(log)
    props.set_properties({"lakelog.test.fence": "1"})
    props.commit()
    with pytest.raises(ConcurrentCommitError):
        theirs.commit({END1: 1})
    mine = RsTransaction.start(log)
    mine.app_version(END1)
    mine.write_rows(records(1, 0, 1))
    DeltaTransaction.start(spark, log).commit_properties({"lakelog.test.fence": "2"})
    with pytest.raises(ConcurrentCommitError):
        mine.commit({END1: 1})
    # a commit of another partition's log end by Spark's engine: rs_engine's append is committed past it
    mine = RsTransaction.start(log)
    mine.app_version(END1)
    mine.write_rows(records(1, 0, 1))
    spark_append(spark, log, 0, 1)
    assert mine.commit({END1: 1}) == mine.read_version + 2
    assert spark_values(spark, log) == ["0:0", "0:1", "0:2", "1:0"]
    assert TopicLog.for_path(spark, log).log_end_offsets() == {0: 3, 1: 1}


def test_tags_in_statistics_survive_sparks_checkpoint_and_the_change_feed_reads_removals_as_deletes(spark, log):
    rs_append(log, 0, 2, tags={"lakelog.ranges": "0:0-1"})
    rs_append(log, 1, 1)
    delta_log = delta(spark).DeltaLog.forTable(spark._jsparkSession, log)
    none = jvm(spark, "scala.Option.empty()")
    snapshot = delta_log.update(False, none, none)
    delta_log.checkpoint(snapshot, none)  # Spark's own checkpoint of rs_engine's adds
    assert json.loads(open(f"{log}/_delta_log/_last_checkpoint").read())["version"] == snapshot.version()
    tagged = [json.loads(t) for t in snapshot.allFiles().toJSON().collectAsList()]
    assert [json.loads(f["stats"])["numRecords"] for f in tagged if "lakelog.tags" in f["stats"]] == [2]
    files = RsTransaction.start(log).files()  # read from Spark's checkpoint
    assert [f["tags"] for f in files if f["partitionValues"] == {"partition": "0"}] == [{"lakelog.ranges": "0:0-1"}]
    assert spark.read.format("delta").load(log).where("offset = 1").count() == 1

    txn = RsTransaction.start(log)
    txn.remove([f for f in files if f["partitionValues"] == {"partition": "1"}], data_change=True)
    removed_at = txn.commit()
    changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", removed_at)
               .load(log).collect())
    assert [(r["_change_type"], bytes(r["value"]).decode()) for r in changes] == [("delete", "1:0")]
    assert spark_values(spark, log) == ["0:0", "0:1"]

    # some rows of a file deleted without change data files: a rearranging commit, then a removal
    (shared,) = [f for f in RsTransaction.start(log).files() if f["partitionValues"] == {"partition": "0"}]
    txn = RsTransaction.start(log)
    txn.remove([shared], data_change=False)
    (doomed,) = txn.write_rows(records(0, 0, 1), data_change=False)
    txn.write_rows(records(0, 1, 1), data_change=False)
    rearranged_at = txn.commit()
    txn = RsTransaction.start(log)
    txn.remove([f for f in txn.files() if f["path"] == doomed.path], data_change=True)
    txn.commit()
    changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", rearranged_at)
               .load(log).collect())
    assert [(r["_change_type"], bytes(r["value"]).decode()) for r in changes] == [("delete", "0:0")]
    assert spark_values(spark, log) == ["0:1"]


def driver_rows(n: int) -> pa.Table:
    """``n`` records for partition 0 as a producer hands them to ``append_rows`` (``ROW_COLUMNS``)."""
    return pa.table({"partition": pa.array([0] * n, pa.int32()), "key": [b"k"] * n,
                     "value": [f"0:{o}".encode() for o in range(n)], "headers": pa.nulls(n, HEADERS),
                     "timestamp": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, "producer_id": ["p"] * n,
                     "sequence": list(range(n))})


@pytest.mark.parametrize("layout", ["partitioned", "arrival"])
def test_an_append_of_driver_rows_is_committed_by_delta_rs_and_fenced_by_sparks_engine(spark, tmp_path, layout):
    """``TopicLog.append_rows`` on a local root commits through rs_engine (its commit info names
    delta-rs), Spark reads what it wrote, and a partition count changed through
    Spark's engine since the producer looked refuses the next append, nothing written."""
    path = str(tmp_path / "log")
    log = TopicLog.create(spark, path, TopicLogMetadata.initial("t", 2), layout=layout)
    result = log.append_rows(driver_rows(3), 2, {"p": -1})
    info = next(json.loads(line)["commitInfo"] for line in open(f"{path}/_delta_log/{result.version:020d}.json")
                if "commitInfo" in line)
    assert info["engineInfo"].startswith("delta-rs"), "the append was not committed by rs_engine"
    assert spark_values(spark, path) == ["0:0", "0:1", "0:2"] and log.log_end_offsets() == {0: 3, 1: 0}
    log.set_metadata(TopicLogMetadata.initial("t", 3))  # a grow, committed by Spark's engine
    with pytest.raises(InvalidPartitionMetadataError):
        log.append_rows(driver_rows(3), 2, {"p": 2})
    assert spark_values(spark, path) == ["0:0", "0:1", "0:2"]
