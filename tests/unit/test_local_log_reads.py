"""What the server and the control plane read of a local table's log without a JVM: its latest
version by one listing, application ids set since a version, and a snapshot's application
versions (``log_store.engine``'s helpers on a local disk). No Spark."""

from __future__ import annotations


import pyarrow as pa
import pytest

from log_store.engine import app_version_changes, app_versions, table_version
from log_store.errors import StorageError
from log_store.rs_create import create_table
from log_store.rs_engine import RsTransaction

SCHEMA = pa.schema([("partition", pa.int32(), False), ("value", pa.string())])


def test_the_latest_version_ids_set_since_and_every_id_of_a_local_table(tmp_path):
    path = str(tmp_path / "t")
    assert table_version(None, path) == -1 and app_versions(None, path) == {}
    create_table(path, SCHEMA, "partition")
    assert table_version(None, path) == 0
    RsTransaction.start(path).commit({}, counters={"lakelog.tick.1": 5, "other": 1})
    RsTransaction.start(path).commit({}, counters={"lakelog.tick.2": 7})
    RsTransaction.start(path).commit({}, counters={"lakelog.tick.1": 2})
    assert table_version(None, path) == 3
    assert {k: v for k, (v, _ms) in app_version_changes(None, path, 1, "lakelog.tick.").items()} == {
        "lakelog.tick.2": 7, "lakelog.tick.1": 2}
    assert app_version_changes(None, path, 3, "lakelog.tick.") == {}
    assert app_versions(None, path) == {"lakelog.tick.1": 2, "lakelog.tick.2": 7, "other": 1}


@pytest.mark.parametrize("kind", ["missing", "not a directory"])
def test_a_lost_root_reads_as_no_table_or_fails_as_storage(tmp_path, kind):
    root = tmp_path / "root"
    path = str(root / "t")
    create_table(path, SCHEMA, "partition")
    root.rename(tmp_path / "away")
    if kind == "missing":
        assert table_version(None, path) == -1
        return
    root.write_text("a file where the root was\n")
    with pytest.raises(StorageError, match="root lost"):
        table_version(None, path)
