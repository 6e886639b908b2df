"""Key compaction (``cleanup.policy=compact``) on real Delta tables: each partition keeps its keys'
latest records at their own offsets, tombstones go ``delete.retention.ms`` after their first
cleaning, young records wait ``min.compaction.lag.ms``, a racing producer loses nothing and a
killed compaction run again leaves the right survivors. Tables are read back with delta-rs."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.layout import RootLayout
from control_plane.topics import TopicAdmin
from log_store import commits
from log_store.crash import CRASH_EXIT_CODE
from log_store.errors import InvalidConfigurationError
from log_store.log_files import partition_files
from log_store.names import cleaned_app_id, log_end_app_id
from log_store.rs_reader import arrow_table
from pipelines.producer import Producer
from tests.control_plane.test_controller import _finish, _worker
from tests.support import make_records, spawn_worker

T = "kc"
COLUMNS = ["partition", "offset", "key", "value"]


def create(spark, root, *configs: str, partitions: int = 2, layout: str = "partitioned") -> TopicController:
    TopicAdmin(spark, root).create(T, partitions, layout=layout)
    ctl = TopicController(spark, root)
    ctl.alter_config(T, ["cleanup.policy=compact", *configs])
    return ctl


def location(spark, root) -> str:
    return TopicAdmin(spark, root).get(T).location


def rows(path: str) -> list[tuple]:
    """(partition, offset, key, value) of every record, by partition and offset, read by delta-rs."""
    found = DeltaTable(path).to_pyarrow_table(columns=COLUMNS).to_pylist()
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in found)


def latest_per_key(records: list[tuple], below: dict[int, int] | None = None) -> list[tuple]:
    """Kafka's compacted log: below ``below[p]`` (default: everything) each key's latest record
    (null keys kept), from there on every record; tombstones as they are."""
    latest: dict[tuple, int] = {}
    for p, o, k, _v in records:
        if k is not None and (below is None or o < below[p]):
            latest[(p, k)] = max(latest.get((p, k), -1), o)
    return [r for r in records
            if r[2] is None or (below is not None and r[1] >= below[r[0]]) or latest[(r[0], r[2])] == r[1]]


def produce(spark, root, batches: int, size: int = 40, keys: int = 7, start: int = 0) -> None:
    producer = Producer(spark, root, T, "p")
    for i in range(batches):
        producer.send(make_records(spark, size, keys=keys, start=start + i * size))


def append_tombstones(spark, path: str, partition: int, keys: list[bytes]) -> None:
    """Tombstones (a null value) for ``keys`` at ``partition``'s log end, committed directly (the
    log's value column made nullable first)."""
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN value DROP NOT NULL")
    txn = commits.start(spark, path)
    end = txn.app_version(log_end_app_id(partition))
    now = pa.scalar(int(time.time() * 1_000_000), pa.timestamp("us", tz="UTC"))
    table = pa.table({"partition": pa.array([partition] * len(keys), pa.int32()),
                      "offset": pa.array(range(end, end + len(keys)), pa.int64()),
                      "leader_epoch": pa.array([0] * len(keys), pa.int32()),
                      "key": pa.array(keys, pa.binary()), "value": pa.nulls(len(keys), pa.binary()),
                      "timestamp": pa.array([now.as_py()] * len(keys), pa.timestamp("us", tz="UTC"))})
    txn.write_rows(table, partition_by="partition")
    txn.commit({log_end_app_id(partition): end + len(keys)})


def cleaned(path: str) -> dict[int, int]:
    found = {}
    for p in (0, 1):
        txn = commits.start(None, path)
        found[p] = txn.snapshot_app_versions().get(cleaned_app_id(p), -1)
        txn.release()
    return found


@pytest.mark.parametrize("layout", ["partitioned", "arrival"])
def test_many_updates_per_key_compact_to_the_latest_per_key_at_their_own_offsets(spark, root, layout):
    ctl = create(spark, root, layout=layout)
    produce(spark, root, 4)
    path = location(spark, root)
    before = rows(path)
    ends = TopicAdmin(spark, root).log(T).log_end_offsets()
    ctl.compact(T)  # the arrival layout's files of several partitions become files of one first
    done = ctl.compact_keys(T)
    assert sorted(c.partition for c in done) == [0, 1]
    assert {c.partition: c.cleaned_up_to for c in done} == ends == cleaned(path)
    after = rows(path)
    assert after == latest_per_key(before), "each key's latest record, at its original offset"
    assert len(after) == 7 and sum(c.records_after for c in done) == 7 and sum(c.records_before for c in done) == 160
    txn = commits.start(spark, path)
    files = [f for fs in partition_files(txn).values() for f in fs]
    txn.release()
    assert all(f.cleaned_at_ms is not None for f in files), "each rewritten file dates its cleaning"
    assert sorted((f.partition, f.first, f.last, f.records) for f in files) == [
        (p, min(r[1] for r in after if r[0] == p), max(r[1] for r in after if r[0] == p), sum(r[0] == p for r in after))
        for p in (0, 1)], "one file a partition, its offset statistics those of the survivors"
    table = [r for r in DeltaTable(RootLayout(root).control("key_compactions")).to_pyarrow_table().to_pylist()]
    assert sorted((r["partition"], r["cleaned_up_to"], r["reason"]) for r in table) == \
        [(0, ends[0], "dirty ratio"), (1, ends[1], "dirty ratio")]
    assert ctl.compact_keys(T) == [], "nothing dirty"
    # more updates: the next cleaning merges them with what was cleaned
    produce(spark, root, 2, start=1000)
    before = rows(path)
    ctl.compact(T)
    assert ctl.compact_keys(T) != [] and rows(path) == latest_per_key(before)


def test_a_tick_cleans_a_compacted_topic_and_not_a_deleting_one(spark, root):
    ctl = create(spark, root)
    produce(spark, root, 3)
    path = location(spark, root)
    before = rows(path)
    (result,) = ctl.tick(T)
    assert sorted(c.partition for c in result.cleaned) == [0, 1] and rows(path) == latest_per_key(before)
    ctl.alter_config(T, [], ["cleanup.policy"])  # back to delete, as Kafka allows
    produce(spark, root, 3, start=500)
    assert ctl.tick(T)[0].cleaned == []
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy=delete"):
        ctl.compact_keys(T)


def test_tombstones_stay_until_delete_retention_after_their_first_cleaning(spark, root):
    ctl = create(spark, root, "delete.retention.ms=60000", partitions=1)
    produce(spark, root, 2, size=20, keys=5)  # offsets 0..39, keys k0..k4
    path = location(spark, root)
    append_tombstones(spark, path, 0, [b"k0", b"k1"])  # offsets 40, 41
    now = int(time.time() * 1000) + 1000
    before = rows(path)
    (first,) = ctl.compact_keys(T, now_ms=now)
    assert first.reason == "dirty ratio" and first.cleaned_up_to == 42
    assert rows(path) == latest_per_key(before) == [(0, 37, b"k2", b"37"), (0, 38, b"k3", b"38"),
                                                     (0, 39, b"k4", b"39"), (0, 40, b"k0", None), (0, 41, b"k1", None)]
    assert ctl.compact_keys(T, now_ms=now + 59_999) == [], "not yet past delete.retention.ms"
    (last,) = ctl.compact_keys(T, now_ms=now + 60_000)
    assert last.reason == "tombstones past delete.retention.ms"
    assert rows(path) == [(0, 37, b"k2", b"37"), (0, 38, b"k3", b"38"), (0, 39, b"k4", b"39")]


def test_records_younger_than_the_minimum_lag_wait(spark, root):
    ctl = create(spark, root, "min.compaction.lag.ms=600000")
    produce(spark, root, 3)
    path = location(spark, root)
    before = rows(path)
    assert ctl.compact_keys(T) == [] and rows(path) == before
    assert len(ctl.compact_keys(T, now_ms=int(time.time() * 1000) + 600_000)) == 2
    assert rows(path) == latest_per_key(before)


def test_a_compaction_racing_a_producer_in_another_process_loses_and_reorders_nothing(spark, root, tmp_path):
    """The producer appends in its own process while compactions run here over and over; every
    record it appended (the change feed, which compaction commits do not touch) is in the log
    unless a later record of its key below the cleaned offset replaced it."""
    ctl = create(spark, root, "min.cleanable.dirty.ratio=0")
    produce(spark, root, 1, size=10)
    path = location(spark, root)
    worker = spawn_worker("append", root, T, "racer", "100", "600", "20", "13", env={"LAKELOG_WORKER_ATTACH": "1"})
    rounds = 0
    while worker.poll() is None:
        rounds += len(ctl.compact_keys(T))
        time.sleep(0.2)
    out, err = worker.communicate()
    assert worker.returncode == 0, err[-3000:]
    ctl.compact_keys(T)
    appended = sum(json.loads(line)["appended"] for line in out.splitlines())
    feed = arrow_table(DeltaTable(path).load_cdf(starting_version=0)).to_pylist()
    written = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in feed if r["_change_type"] == "insert")
    assert len(written) == appended + 10 and len({(p, o) for p, o, _k, _v in written}) == len(written)
    assert rounds > 0, "compactions ran while the producer appended"
    assert rows(path) == latest_per_key(written, cleaned(path))


@pytest.mark.parametrize("point", ["compaction:before_commit", "compaction:after_commit"])
def test_a_compaction_killed_at_each_point_then_run_again_leaves_the_right_survivors(spark, root, point):
    create(spark, root)
    produce(spark, root, 3)
    path = location(spark, root)
    before = rows(path)
    crashed = _worker("tick", root, T, "0", crash=point)
    (_out, err), = _finish([crashed])
    assert crashed.returncode == CRASH_EXIT_CODE, err[-3000:]
    assert rows(path) == (before if point == "compaction:before_commit" else latest_per_key(before))
    (out, err), = _finish([_worker("tick", root, T, "0")])
    assert rows(path) == latest_per_key(before), err[-2000:]
    table = DeltaTable(RootLayout(root).control("key_compactions")).to_pyarrow_table().to_pylist()
    assert sorted(r["partition"] for r in table) == [0, 1], "each cleaning recorded once, after a crash too"


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_the_minimum_lag_is_measured_from_the_records_timestamps_as_kafka_does(spark, root, timestamp_type):
    # proves: min.compaction.lag.ms counts from the records' timestamps, as Kafka's cleaner does
    # (docs/concepts.md): records stamped a day ago by their producer (CreateTime) are cleanable at
    # once; on a LogAppendTime topic the append stamps them, so the same records wait the lag
    from pyspark.sql import functions as F

    ctl = create(spark, root, "min.compaction.lag.ms=600000", f"message.timestamp.type={timestamp_type}")
    producer = Producer(spark, root, T, "p")
    day_ago = F.lit(time.time() - 86_400).cast("timestamp")
    for i in range(3):
        producer.send(make_records(spark, 40, keys=7, start=i * 40).withColumn("timestamp", day_ago))
    path = location(spark, root)
    before = rows(path)
    cleaned = ctl.compact_keys(T)
    if timestamp_type == "LogAppendTime":
        assert cleaned == [] and rows(path) == before, "appended a moment ago: within the lag"
    else:
        assert cleaned and rows(path) == latest_per_key(before), "stamped a day ago: past the lag"
