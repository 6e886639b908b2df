"""``lakelog topics table`` of a topic with transactions: the view reads read_committed, so a
marker never becomes a key's state, an aborted transaction's record never does, and an open
transaction's records (and the partition's records after its first) only once it commits. The
table is read back with delta-rs."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from control_plane.topics import TopicAdmin
from tests.pipelines.test_audit_txn import Appends


def _state(path: str) -> dict[str, str]:
    rows = DeltaTable(path).to_pyarrow_table(columns=["key", "value"]).to_pylist()
    return {bytes(r["key"]).decode(): bytes(r["value"]).decode() for r in rows}


def test_the_table_holds_committed_records_only(spark, root, run, tmp_path):
    admin = TopicAdmin(spark, root)
    admin.create("t", 2)
    tx = Appends(admin.log("t"))
    tx.send("plain", 0, ["a", "b"])
    tx.send("co", 0, ["a"], epoch=0)
    tx.send("ab", 0, ["b", "c"], epoch=0)  # an aborted update of b, an aborted c
    tx.end("co", True, [0])
    tx.end("ab", False, [0])
    tx.send("open", 1, ["d"], epoch=0)
    tx.send("plain", 1, ["e"])  # after the open transaction's first offset: not stable yet
    table, ck = str(tmp_path / "now"), str(tmp_path / "ck")
    args = ("topics", "table", "--topic", "t", "--output", table, "--checkpoint", ck, "--json")
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert _state(table) == {"a": "co-a", "b": "plain-b"}
    assert json.loads(first.stdout)["keys"] == 2
    tx.end("open", True, [1])
    again = run(*args)
    assert again.exit_code == 0, again.output
    assert _state(table) == {"a": "co-a", "b": "plain-b", "d": "open-d", "e": "plain-e"}
