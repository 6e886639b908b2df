"""The arrival layout (docs/design.md): one file per write holding every partition it got, each
file's partitions in its tags; delete-records frees a shared file only when every partition in it
is below its log start; compaction rewrites shared files whole into one file per partition.
Read back with delta-rs."""

from __future__ import annotations

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
    assert admin.log("p").layout() == "partitioned", "the default"
    bad = CliRunner().invoke(cli, ["--root", root, "topics", "create", "--topic", "b", "--partitions", "2",
                                   "--layout", "mixed"])
    assert bad.exit_code == 2 and "mixed" in bad.output
    assert "b" not in {r.topic for r in admin.list()}
