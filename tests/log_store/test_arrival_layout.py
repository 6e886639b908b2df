"""The arrival layout (docs/design.md): one file per write holding every partition it got, each
file's partitions in its tags; delete-records frees a shared file only when every partition in it
is below its log start; compaction rewrites shared files whole into one file per partition.
Read back with delta-rs."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.topics import TopicAdmin
from log_store import topic_log
from log_store.engine import DeltaTransaction
from log_store.log_files import RANGES_TAG, decode_ranges
from pipelines.producer import Producer
from tests.support import log_rows, make_records

T = "arr"


@pytest.fixture
def arrival(monkeypatch):
    monkeypatch.setattr(topic_log, "DEFAULT_LAYOUT", topic_log.ARRIVAL)


def adds(spark, location: str) -> list[dict]:
    """Each data file's ranges from its add action's tags (delta-rs does not list tags)."""
    return [{"path": a["path"], "ranges": decode_ranges(a["tags"][RANGES_TAG])}
            for a in DeltaTransaction.start(spark, location).files()]


def test_an_arrival_topics_life_keeps_every_record_once_and_frees_files_only_when_wholly_below(spark, root, arrival):
    TopicAdmin(spark, root).create(T, 3)
    location = TopicAdmin(spark, root).get(T).location
    producer = Producer(spark, root, T, "p")
    for i in range(4):
        producer.send(make_records(spark, 60, keys=11, start=i * 60))
    files = adds(spark, location)
    assert len(files) == 4 and all(len(f["ranges"]) == 3 for f in files), "one file a produce, every partition in it"
    rows = sorted((r["partition"], r["offset"]) for r in log_rows(root, T))
    assert len(rows) == 240 and all(rows.count(x) == 1 for x in rows)

    ctl = TopicController(spark, root)
    first = min(files, key=lambda f: f["ranges"][0][0])
    (change,) = ctl.delete_records(T, {0: first["ranges"][0][1] + 1})
    assert change.files_removed == 0, "partitions 1 and 2 still read the first file"
    assert len(adds(spark, location)) == 4

    results = ctl.compact(T)
    assert {c.partition for c in results} == {0, 1, 2}
    after = adds(spark, location)
    assert all(len(f["ranges"]) == 1 for f in after), "compacted into one file per partition"
    assert sorted((r["partition"], r["offset"]) for r in log_rows(root, T)) == rows, "compaction changes no record"
    for uri in DeltaTable(location).file_uris():
        offsets = pq.read_table(uri, columns=["offset"]).column("offset").to_pylist()
        assert offsets == sorted(offsets)
    (change,) = ctl.delete_records(T, {1: max(b for f in after for p, (a, b, n) in f["ranges"].items() if p == 1) + 1})
    assert change.files_removed == 1, "a one-partition segment wholly below goes"
    assert {p for f in adds(spark, location) for p in f["ranges"]} == {0, 2}


def test_the_layout_is_chosen_per_topic_and_an_unknown_one_is_refused_with_nothing_made(spark, root):
    from click.testing import CliRunner

    from jobs.cli import cli

    out = CliRunner().invoke(cli, ["--root", root, "topics", "create", "--topic", "a", "--partitions", "2",
                                   "--layout", "arrival"])
    assert out.exit_code == 0, out.output
    admin = TopicAdmin(spark, root)
    assert admin.log("a").layout() == "arrival"
    admin.create("p", 2)
    assert admin.log("p").layout() == os.environ.get("LAKELOG_LAYOUT", "partitioned"), "the default"
    bad = CliRunner().invoke(cli, ["--root", root, "topics", "create", "--topic", "b", "--partitions", "2",
                                   "--layout", "mixed"])
    assert bad.exit_code == 2 and "mixed" in bad.output
    assert "b" not in {r.topic for r in admin.list()}


def test_a_retired_partitions_rows_leave_shared_files_and_the_feed_shows_them_deleted_once(spark, root, arrival):
    from log_store.rewrites import delete_below

    TopicAdmin(spark, root).create(T, 3)
    location = TopicAdmin(spark, root).get(T).location
    producer = Producer(spark, root, T, "p")
    for i in range(3):
        producer.send(make_records(spark, 45, keys=9, start=i * 45))
    before = {(r["partition"], r["offset"]): r["value"] for r in log_rows(root, T)}
    end = 1 + max(o for p, o in before if p == 1)

    assert delete_below(spark, location, {1: end}) == [1]
    assert delete_below(spark, location, {1: end}) == [], "nothing left to delete"
    after = {(r["partition"], r["offset"]): r["value"] for r in log_rows(root, T)}  # delta-rs
    assert after == {k: v for k, v in before.items() if k[0] != 1}, "the others' rows kept, unchanged"
    assert set().union(*(f["ranges"] for f in adds(spark, location))) == {0, 2}

    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(location)
    changes = [(r["partition"], r["offset"], r["_change_type"]) for r in feed.collect()]
    inserted = [(p, o) for p, o, t in changes if t == "insert"]
    assert sorted(inserted) == sorted(before), "every record inserted once: the rewrite is not an insert"
    assert sorted((p, o) for p, o, t in changes if t == "delete") == sorted(k for k in before if k[0] == 1)

    (change,) = TopicController(spark, root).delete_records(T, {0: 1 + max(o for p, o in after if p == 0)})
    assert change.files_removed >= 1, "the rewritten segments are files of one partition"


def test_a_deleted_arrival_topic_is_emptied_and_created_again(spark, root, arrival):
    admin = TopicAdmin(spark, root)
    admin.create(T, 2)
    Producer(spark, root, T, "p").send(make_records(spark, 20, keys=4))
    location = admin.get(T).location
    TopicController(spark, root).delete(T)
    assert DeltaTable(location).file_uris() == []
    admin.create(T, 2)
    Producer(spark, root, T, "p").send(make_records(spark, 10, keys=4))
    assert len(log_rows(root, T)) == 10


def test_an_old_topic_moves_to_the_arrival_layout_and_back_with_every_record_kept(spark, root):
    import json

    from click.testing import CliRunner

    from jobs.cli import cli

    admin = TopicAdmin(spark, root)
    admin.create(T, 3, layout="partitioned")
    location = admin.get(T).location
    producer = Producer(spark, root, T, "p")
    for i in range(2):
        producer.send(make_records(spark, 30, keys=7, start=i * 30))
    fields = ("partition", "offset", "leader_epoch", "value", "producer_id", "sequence")
    before = sorted(tuple(r[f] for f in fields) for r in log_rows(root, T))
    old_version = DeltaTable(location).version()

    def alter(layout: str) -> dict:
        out = CliRunner().invoke(cli, ["--root", root, "topics", "alter", "--topic", T, "--layout", layout, "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    moved = alter("arrival")
    assert (moved["layout"]["previous"], moved["topic"]["layout"]) == ("partitioned", "arrival")
    assert moved["layout"]["records"] == 60 and moved["layout"]["version"] is not None
    assert sorted(tuple(r[f] for f in fields) for r in log_rows(root, T)) == before, "no record changed (delta-rs)"
    assert DeltaTable(location).metadata().partition_columns == []
    for f in adds(spark, location):
        assert all(n == b - a + 1 for a, b, n in f["ranges"].values()), "each file's partitions dense"
    old = spark.read.format("delta").option("versionAsOf", old_version).load(location)
    assert old.count() == 60, "time travel reads the files of before"
    assert alter("arrival")["layout"]["version"] is None, "the same layout again changes nothing"

    producer.send(make_records(spark, 30, keys=7, start=60))  # numbered on from the kept log ends
    after = sorted((r["partition"], r["offset"]) for r in log_rows(root, T))
    assert all(after.count(x) == 1 for x in after) and len(after) == 90
    for p in range(3):
        offsets = [o for q, o in after if q == p]
        assert offsets == list(range(len(offsets))), f"partition {p} dense"

    back = alter("partitioned")
    assert back["topic"]["layout"] == "partitioned" and back["layout"]["records"] == 90
    assert DeltaTable(location).metadata().partition_columns == ["partition"]
    assert sorted((r["partition"], r["offset"]) for r in log_rows(root, T)) == after
    bad = CliRunner().invoke(cli, ["--root", root, "topics", "alter", "--topic", T, "--layout", "mixed"])
    assert bad.exit_code == 2 and "mixed" in bad.output


def test_an_arrival_files_ranges_survive_a_checkpoint_spark_writes(spark, root, arrival):
    """The tags are the only record of a shared file's partitions: a Delta checkpoint written by
    Spark keeps them, and a snapshot read from it (its commit files gone) still plans by them."""
    from pathlib import Path

    from log_store.delta_classes import delta

    TopicAdmin(spark, root).create(T, 3)
    location = TopicAdmin(spark, root).get(T).location
    producer = Producer(spark, root, T, "p")
    for i in range(3):
        producer.send(make_records(spark, 30, keys=7, start=i * 30))
    before = sorted((f["path"], tuple(sorted(f["ranges"].items()))) for f in adds(spark, location))
    log = delta(spark).DeltaLog.forTable(spark._jsparkSession, location)
    log.checkpoint()
    folder = Path(location, "_delta_log")
    checkpoints = list(folder.glob("*.checkpoint.parquet"))
    assert checkpoints, "Spark wrote a checkpoint"
    version = int(checkpoints[0].name.split(".")[0])
    for f in folder.glob("*.json"):
        if int(f.name.split(".")[0]) < version:
            f.unlink()  # the snapshot can only come from the checkpoint now
    delta(spark).DeltaLog.clearCache()
    assert sorted((f["path"], tuple(sorted(f["ranges"].items()))) for f in adds(spark, location)) == before
    (change,) = TopicController(spark, root).compact(T)[:1]
    assert all(len(f["ranges"]) == 1 for f in adds(spark, location)), "compaction planned from the checkpoint's tags"
