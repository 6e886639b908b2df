"""``lakelog consume --isolation-level``: a real process under ``LAKELOG_NO_JVM=1`` reading a log
whose transactions this test wrote (with the log's API, as serve's producer will)."""

import json

import pyarrow as pa
import pytest

from control_plane.topics import TopicAdmin
from log_store.session import LazySession
from tests.jobs.test_no_jvm import lakelog
from tests.pipelines.test_txn_consume import Producers


@pytest.fixture(autouse=True)
def no_jvm(monkeypatch):
    monkeypatch.setenv("LAKELOG_NO_JVM", "1")


def consumed(root, group, *more):
    out = lakelog(root, "consume", "--topic", "t", "--group", group, "--from-beginning", "--json", *more).stdout
    return [(r["partition"], r["offset"], r["value"]) for r in map(json.loads, out.splitlines()) if r]


def test_consume_reads_uncommitted_by_default_and_committed_when_asked(tmp_path):
    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "2")
    tx = Producers(TopicAdmin(LazySession(lambda: pytest.fail("a JVM was started")), str(root)).log("t"))
    tx.send("ab", 0, ["ab0"], epoch=0)
    tx.end("ab", 0, False, [0, 1])
    tx.send("co", 1, ["co0"], epoch=0)
    tx.end("co", 0, True, [1])
    tx.send("open", 0, ["op0"], epoch=0)
    tx.send("plain", 1, ["p0"])
    assert consumed(root, "u") == [(0, 0, "ab0"), (0, 2, "op0"), (1, 1, "co0"), (1, 3, "p0")]
    assert consumed(root, "c", "--isolation-level", "read_committed") == [(1, 1, "co0"), (1, 3, "p0")]
    described = json.loads(lakelog(root, "groups", "describe", "--group", "c", "--json").stdout)
    assert {p["partition"]: p["committed_offset"] for p in described["partitions"]} == {0: 2, 1: 4}
    bad = lakelog(root, "consume", "--topic", "t", "--isolation-level", "serializable", check=False)
    assert bad.returncode != 0 and "read_committed" in bad.stderr


def test_a_follower_takes_the_markers_and_the_marks_and_reads_committed_once_elected(tmp_path):
    """Replication copies a transaction's markers with their control column, and the partition's
    transaction marks and epochs: after an election the new leader's read_committed readers stop
    at the same last stable offset and leave out the same aborted records."""
    from deltalake import DeltaTable

    from log_store.txn_marks import txn_epoch_app_id, txn_mark_app_id

    root, eu, us = tmp_path / "root", str(tmp_path / "eu"), str(tmp_path / "us")
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "1", "--replicas", f"{eu},{us}")
    admin = TopicAdmin(LazySession(lambda: pytest.fail("a JVM was started")), str(root))
    Producers(admin.log("t"), count=1).aborted_committed_open(open_epoch=2)
    lakelog(root, "replicate", "--topic", "t")
    lakelog(root, "topics", "elect-leader", "--topic", "t", "--leader", us)
    new_leader = admin.get("t").location
    assert new_leader.startswith(us)
    rows = DeltaTable(new_leader).to_pyarrow_table(columns=["offset", "control"]).to_pylist()
    assert sorted((r["offset"], r["control"]) for r in rows) == [(0, None), (1, "abort"), (2, None), (3, "commit"),
                                                                  (4, None), (5, None)]
    known = admin.log("t").app_versions()
    assert known[txn_mark_app_id("open", 0)] == 2 * 4 + 1 and known[txn_epoch_app_id("open", 0)] == 2
    assert consumed(root, "c", "--isolation-level", "read_committed") == [(0, 2, "co0")]


def test_a_partition_read_holds_one_chunk_of_offsets_at_a_time(tmp_path):
    """``consume --partition`` prints a long partition a chunk of ``max_records_per_batch`` offsets
    at a time, never the whole range at once; chunked or not, the same records, markers and
    aborted records left out across the chunks' edges."""
    from pipelines.partition_read import partition_chunks, read_partition
    from pipelines.settings import ConsumerSettings

    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "1")
    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    tx = Producers(TopicAdmin(spark, str(root)).log("t"), count=1)
    tx.send("plain", 0, [f"p{i}" for i in range(5)])
    tx.send("ab", 0, ["ab0", "ab1"], epoch=0)
    tx.send("co", 0, ["co0"], epoch=0)
    tx.end("ab", 0, False, [0])
    tx.send("plain", 0, ["p5", "p6"])
    tx.end("co", 0, True, [0])
    tx.send("plain", 0, ["p7"])
    for level in ("read_uncommitted", "read_committed"):
        whole = read_partition(spark, str(root), "t", 0, "earliest", settings=ConsumerSettings(isolation_level=level))
        assert whole.num_rows == (9 if level == "read_committed" else 11)
        for step in (1, 2, 3, 5):
            chunks = list(partition_chunks(spark, str(root), "t", 0, "earliest",
                                           settings=ConsumerSettings(isolation_level=level, max_records_per_batch=step)))
            assert len(chunks) == -(-13 // step) and all(c.num_rows <= step for c in chunks)  # 13 offsets, 2 markers
            assert pa.concat_tables(chunks).to_pylist() == whole.to_pylist()
        assert read_partition(spark, str(root), "t", 0, 3, max_records=4, settings=ConsumerSettings(
            isolation_level=level, max_records_per_batch=3)).num_rows <= 4
    conf = tmp_path / "small.yaml"
    conf.write_text(f"root: {root}\nconsumer:\n  max_records_per_batch: 2\n")
    args = ("consume", "--topic", "t", "--partition", "0", "--offset", "earliest", "--json")
    assert lakelog(root, "--conf", str(conf), *args).stdout == lakelog(root, *args).stdout != ""
