"""``lakelog consume --isolation-level``: a real process under ``LAKELOG_NO_JVM=1`` reading a log
whose transactions this test wrote (with the log's API, as serve's producer will)."""

import json

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
