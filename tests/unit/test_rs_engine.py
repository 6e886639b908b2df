"""The fenced transaction through delta-rs's public API (log_store.rs_engine): the races that
reject a commit, those it passes over, and what it refuses; read back with delta-rs and from the
commit files themselves. No Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from log_store import delta_log
from log_store.errors import AppVersionConflictError, ConcurrentCommitError, InvalidConfigurationError, LakelogError
from log_store.object_store import arrow_filesystem
from log_store.commit_files import conflict
from log_store.rs_create import create_table
from log_store.rs_engine import RsTransaction

SCHEMA = pa.schema([("partition", pa.int32(), False), ("offset", pa.int64()), ("value", pa.string())])
END0, END1 = "lakelog.log_end.0", "lakelog.log_end.1"


@pytest.fixture()
def table(tmp_path) -> str:
    path = str(tmp_path / "log")
    create_table(path, SCHEMA, "partition", {"delta.enableChangeDataFeed": "true", "lakelog.count": "2"})
    return path


def rows(partition: int, *offsets: int) -> pa.Table:
    return pa.table({"partition": [partition] * len(offsets), "offset": list(offsets),
                     "value": [f"{partition}:{o}" for o in offsets]})


def commit_file(path: str, version: int) -> list[dict]:
    return [json.loads(line) for line in Path(path, "_delta_log", f"{version:020d}.json").read_text().splitlines()]


def values(path: str) -> list[str]:
    return sorted(r["value"] for r in DeltaTable(path).to_pyarrow_table().to_pylist())


def test_a_table_is_created_with_its_properties_once_whoever_races_to_make_it(tmp_path, table):
    txn = RsTransaction.start(table)
    assert txn.configuration() == {"delta.enableChangeDataFeed": "true", "lakelog.count": "2"}
    assert DeltaTable(table).metadata().partition_columns == ["partition"]
    again = create_table(table, SCHEMA, "partition", {"lakelog.count": "9"})
    assert again == txn.read_version and RsTransaction.start(table).configuration()["lakelog.count"] == "2"
    assert txn.read_version == 0, "on a local disk: one commit, its properties included (log_store.table_create)"


def test_an_append_commits_its_rows_and_application_versions_in_one_commit(table):
    txn = RsTransaction.start(table)
    assert txn.app_version(END0) == -1
    written = txn.write_rows(pa.concat_tables([rows(0, 0, 1), rows(1, 0)]))
    assert sorted((f.partition_values["partition"], f.num_records) for f in written) == [("0", 2), ("1", 1)]
    version = txn.commit({END0: 2, END1: 1}, user_metadata='{"lakelog":"produce"}')
    assert version == txn.read_version + 1
    assert values(table) == ["0:0", "0:1", "1:0"]
    actions = commit_file(table, version)
    info = actions[0]["commitInfo"]
    assert info["userMetadata"] == '{"lakelog":"produce"}' and info["readVersion"] == txn.read_version
    assert not [a for a in actions if "metaData" in a or "protocol" in a], "an append changes no metadata"
    assert {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a} == {END0: 2, END1: 1}
    after = RsTransaction.start(table)
    assert after.app_version(END0) == 2 and after.snapshot_app_versions() == {END0: 2, END1: 1}


def test_a_concurrent_metadata_change_rejects_the_commit(table):
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    mine.app_version(END0)
    mine.write_rows(rows(0, 0))
    theirs.set_properties({"lakelog.count": "3"})
    theirs.commit()
    with pytest.raises(ConcurrentCommitError, match="MetadataChangedException") as raised:
        mine.commit({END0: 1})
    assert not isinstance(raised.value, AppVersionConflictError)
    assert values(table) == [] and RsTransaction.start(table).app_version(END0) == -1


@pytest.mark.parametrize("how", ["app_version", "depend_on", "sets it"])
def test_a_concurrent_commit_of_an_application_id_this_one_depends_on_rejects_it(table, how):
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    if how == "app_version":
        mine.app_version(END0)
    elif how == "depend_on":
        mine.depend_on([END0, "lakelog.producer.p"])
    mine.write_rows(rows(0, 0))
    theirs.write_rows(rows(0, 0))
    theirs.commit({END0: 1})
    with pytest.raises(AppVersionConflictError, match="ConcurrentTransactionException"):
        mine.commit({END0: 1} if how == "sets it" else {END1: 5})
    assert values(table) == ["0:0"] and RsTransaction.start(table).snapshot_app_versions() == {END0: 1}


def test_an_unrelated_concurrent_commit_is_passed_over_as_delta_rebases_it(table):
    """A commit that touched neither the metadata nor an id this one depends on: this commit
    lands at the next version, as Delta's own would (appends to other partitions never conflict)."""
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    mine.app_version(END0)
    mine.write_rows(rows(0, 0))
    theirs.app_version(END1)
    theirs.write_rows(rows(1, 0))
    assert theirs.commit({END1: 1}) == mine.read_version + 1
    assert mine.commit({END0: 1}) == mine.read_version + 2
    assert values(table) == ["0:0", "1:0"]
    assert RsTransaction.start(table).snapshot_app_versions() == {END0: 1, END1: 1}


def test_a_transaction_that_read_the_whole_table_conflicts_with_any_concurrent_append(table):
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    mine.read_whole_table()
    mine.write_rows(rows(0, 0))
    theirs.write_rows(rows(1, 0))
    theirs.commit()
    with pytest.raises(ConcurrentCommitError, match="ConcurrentAppendException"):
        mine.commit()


def test_a_falling_application_version_is_refused_with_nothing_committed(table):
    first = RsTransaction.start(table)
    first.commit({END0: 5})
    txn = RsTransaction.start(table)
    txn.write_rows(rows(0, 0))
    with pytest.raises(LakelogError, match="would fall from 5 to 4"):
        txn.commit({END0: 4})
    assert values(table) == [] and DeltaTable(table).version() == first.read_version + 1
    again = RsTransaction.start(table)  # set again at the same version: allowed
    assert again.commit({END0: 5}) == first.read_version + 2


def test_a_counter_may_fall_and_concurrent_commits_of_it_both_land(table):
    """A liveness tick (a server's, a group member's) is a counter read as "changed": a restarted
    process starts it anywhere, and two commits setting it race without either being refused."""
    first = RsTransaction.start(table)
    first.commit({}, counters={"lakelog.tick.1": 9})
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    theirs.commit({}, counters={"lakelog.tick.1": 3})
    assert mine.commit({}, counters={"lakelog.tick.1": 2}) == first.read_version + 3
    assert RsTransaction.start(table).snapshot_app_versions() == {"lakelog.tick.1": 2}


def test_an_optimize_commit_sets_counters_that_may_fall(table):
    """Key compaction's judged offsets (names.judged_app_id) fall where a partition's cleanable end did."""
    first = RsTransaction.start(table)
    first.commit_as("OPTIMIZE", {}, counters={"lakelog.judged.0": 9})
    assert RsTransaction.start(table).commit_as("OPTIMIZE", {}, counters={"lakelog.judged.0": 4}) \
        == first.read_version + 2
    assert RsTransaction.start(table).snapshot_app_versions() == {"lakelog.judged.0": 4}


def test_a_removed_file_leaves_the_snapshot_and_a_concurrent_removal_of_it_rejects(table):
    txn = RsTransaction.start(table)
    txn.write_rows(rows(0, 0, 1))
    txn.write_rows(rows(1, 0))
    txn.commit()
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    (in_zero,) = [f for f in mine.files() if f["partitionValues"] == {"partition": "0"}]
    theirs.remove([in_zero], data_change=True)
    theirs.commit()
    assert values(table) == ["1:0"]
    left = [f["path"] for f in mine.files() if f["path"] != in_zero["path"]]
    assert [f["path"] for f in RsTransaction.start(table).files()] == left
    mine.remove([in_zero], data_change=False)
    with pytest.raises(ConcurrentCommitError, match="ConcurrentDeleteDeleteException"):
        mine.commit()


def test_properties_are_set_and_dropped_through_delta_rs(table):
    txn = RsTransaction.start(table)
    txn.set_properties({"lakelog.epoch": "1"})
    assert txn.commit({END0: 0}) == txn.read_version + 1  # properties with application versions: one commit
    assert RsTransaction.start(table).configuration()["lakelog.epoch"] == "1"
    assert RsTransaction.start(table).app_version(END0) == 0
    txn = RsTransaction.start(table)
    txn.set_properties({"lakelog.count": "3"}, drop=["lakelog.epoch"])
    txn.commit()
    assert RsTransaction.start(table).configuration() == {"delta.enableChangeDataFeed": "true", "lakelog.count": "3"}
    with pytest.raises(InvalidConfigurationError):
        RsTransaction.start(table).set_properties({}, drop=["delta.enableChangeDataFeed"])


def test_properties_with_files_are_one_commit_lakelog_writes_and_fence_as_delta_rs_commits_do(table):
    """delta-rs commits properties or files; both at once are a commit file lakelog writes
    (``commit_files``): its metadata, application versions and files in one version, a dropped
    property gone for good, and the same conflict rules either way round."""
    both = RsTransaction.start(table)
    both.app_version(END0)
    both.write_rows(rows(0, 0, 1))
    both.set_properties({"lakelog.count": "4", "lakelog.epoch": "2"})
    version = both.commit({END0: 2}, operation="REPLICATE")
    assert version == both.read_version + 1 and values(table) == ["0:0", "0:1"]
    actions = commit_file(table, version)
    assert actions[0]["commitInfo"]["engineInfo"] == "lakelog" and actions[0]["commitInfo"]["operation"] == "REPLICATE"
    after = RsTransaction.start(table)
    assert after.configuration() == {"delta.enableChangeDataFeed": "true", "lakelog.count": "4", "lakelog.epoch": "2"}
    assert after.app_version(END0) == 2 and after.table_id() == both.table_id()
    assert DeltaTable(table).metadata().partition_columns == ["partition"]

    dropping = RsTransaction.start(table)
    dropping.write_rows(rows(1, 0))
    dropping.set_properties({}, drop=["lakelog.epoch"])
    dropping.commit({END1: 1})
    assert "lakelog.epoch" not in DeltaTable(table).metadata().configuration, "removed, not set to ''"

    # it loses to a concurrent metadata change, and to a commit of an id it depends on ...
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    mine.app_version(END0)
    mine.write_rows(rows(0, 2))
    mine.set_properties({"lakelog.count": "5"})
    theirs.write_rows(rows(0, 2))
    theirs.commit({END0: 3})
    with pytest.raises(AppVersionConflictError):
        mine.commit({END0: 3})
    # ... a delta-rs commit loses to it ...
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    mine.write_rows(rows(1, 1))
    mine.set_properties({"lakelog.count": "6"})
    theirs.app_version(END1)
    theirs.write_rows(rows(1, 1))
    mine.commit({END1: 2})
    with pytest.raises(ConcurrentCommitError, match="MetadataChangedException"):
        theirs.commit({END1: 2})
    # ... and it passes over an unrelated append, landing after it
    mine, theirs = RsTransaction.start(table), RsTransaction.start(table)
    mine.set_properties({"lakelog.count": "7"})
    mine.write_rows(rows(1, 2))
    theirs.write_rows(rows(0, 3))
    landed = theirs.commit()
    assert mine.commit() == landed + 1
    assert values(table) == ["0:0", "0:1", "0:2", "0:3", "1:0", "1:1", "1:2"]
    assert RsTransaction.start(table).configuration()["lakelog.count"] == "7"


def test_a_partition_column_change_and_change_data_files_are_one_commit(table):
    txn = RsTransaction.start(table)
    txn.write_rows(pa.concat_tables([rows(0, 0, 1), rows(1, 0)]))
    txn.commit()
    move = RsTransaction.start(table)
    move.read_whole_table()
    old = move.files()
    move.repartition_table([], {"lakelog.layout": "arrival"})
    move.write_rows(pa.concat_tables([rows(0, 0, 1), rows(1, 0)]), data_change=False)
    move.remove(old, data_change=False)
    move.commit(operation="OPTIMIZE")
    assert DeltaTable(table).metadata().partition_columns == []
    assert values(table) == ["0:0", "0:1", "1:0"]
    assert all("=" not in f["path"] for f in RsTransaction.start(table).files()), "files laid out unpartitioned"

    delete = RsTransaction.start(table)
    files = delete.files()
    delete.write_rows(rows(0, 1), data_change=True)
    delete.write_changes(rows(0, 0), "delete")
    delete.remove(files, data_change=True)
    version = delete.commit(operation="DELETE")
    cdc = [a["cdc"] for a in commit_file(table, version) if "cdc" in a]
    assert len(cdc) == 1 and cdc[0]["path"].startswith("_change_data/")
    changes = DeltaTable(table).load_cdf(starting_version=version, ending_version=version).read_all()
    assert changes.column("_change_type").to_pylist() == ["delete"] and changes.column("value").to_pylist() == ["0:0"]
    assert not [a for a in commit_file(table, version) if "metaData" in a], "files alone: no metadata change"

    # a commit of files alone changes no metadata: an append racing it is passed over, not refused
    deleting, appending = RsTransaction.start(table), RsTransaction.start(table)
    deleting.write_changes(rows(0, 1), "delete")
    deleting.remove(deleting.files(), data_change=True)
    appending.app_version(END1)
    appending.write_rows(rows(1, 1))
    deleting.commit(operation="DELETE")
    assert appending.commit({END1: 2}) == deleting.read_version + 2


def test_tags_ride_in_the_statistics_and_come_back_from_commits_and_checkpoints(table):
    txn = RsTransaction.start(table)
    txn.write_rows(rows(0, 0, 1), tags={"lakelog.ranges": "0:0-1"})
    txn.commit({END0: 2})
    (add,) = RsTransaction.start(table).files()
    assert add["tags"] == {"lakelog.ranges": "0:0-1"} and json.loads(add["stats"])["numRecords"] == 2
    assert DeltaTable(table).count() == 2, "delta-rs reads the statistics with the extra key"
    checkpointed = DeltaTable(table)
    checkpointed.create_checkpoint()
    for v in range(checkpointed.version()):  # as log cleanup leaves it: only the checkpoint holds them
        Path(table, "_delta_log", f"{v:020d}.json").unlink()
    RsTransaction.start(table).commit({END1: 1})
    fs, root = arrow_filesystem(table)
    state = delta_log.replay(fs, f"{root}/_delta_log", DeltaTable(table).version(), with_files=True)
    assert state.txns == {END0: 2, END1: 1}
    assert [f["path"] for f in state.files.values()] == [add["path"]]
    assert RsTransaction.start(table).files()[0]["tags"] == {"lakelog.ranges": "0:0-1"}


@pytest.mark.parametrize("failure", [CommitFailedError("the store's answer was lost"),
                                     LakelogError("delta-rs's checkpoint after the commit failed")])
def test_a_commit_that_landed_though_its_answer_was_lost_is_not_made_twice(table, monkeypatch, failure):
    txn = RsTransaction.start(table)
    txn.write_rows(rows(0, 0))
    real = RsTransaction._commit_at

    def lands_then_fails(self, props):
        real(self, props)
        raise failure

    monkeypatch.setattr(RsTransaction, "_commit_at", lands_then_fails)
    assert txn.commit({END0: 1}) == txn.read_version + 1
    assert DeltaTable(table).version() == txn.read_version + 1 and values(table) == ["0:0"]


@pytest.mark.parametrize("failure", [CommitFailedError("Failed to commit transaction: storage refused"),
                                     LakelogError("Delta write failed: storage refused")])
def test_a_failed_commit_with_no_commit_past_it_is_not_taken_for_a_lost_race(table, monkeypatch, failure):
    def fails(self, props):
        raise failure

    monkeypatch.setattr(RsTransaction, "_commit_at", fails)
    with pytest.raises(LakelogError) as raised:
        RsTransaction.start(table).commit({END0: 1})
    assert not isinstance(raised.value, ConcurrentCommitError)


def test_conflicts_follow_deltas_rules_and_order():
    txn = {"txn": {"appId": END0, "version": 3}}
    add = {"add": {"path": "a", "dataChange": True}}
    compacted = {"add": {"path": "c", "dataChange": False}}
    remove = {"remove": {"path": "r", "dataChange": True}}
    assert conflict([txn, add, remove], {END1}, set(), False) is None
    assert conflict([txn], {END0}, set(), False) == "ConcurrentTransactionException"
    assert conflict([txn, {"metaData": {}}], {END0}, set(), False) == "MetadataChangedException"
    assert conflict([{"protocol": {}}, {"metaData": {}}], set(), set(), False) == "ProtocolChangedException"
    assert conflict([add], set(), set(), True) == "ConcurrentAppendException"
    assert conflict([compacted], set(), set(), True) is None
    assert conflict([remove], set(), set(), True) == "ConcurrentDeleteReadException"
    assert conflict([remove], set(), {"r"}, False) == "ConcurrentDeleteDeleteException"


def test_a_table_made_again_at_its_path_is_read_anew_never_from_the_one_kept_open(tmp_path):
    """Tables stay open between transactions (log_store.rs_tables); a topic deleted and created
    again at the same path has another history, which must not be applied onto the old state."""
    import shutil

    path = str(tmp_path / "log")
    create_table(path, SCHEMA, "partition", {"lakelog.count": "1"})
    old = RsTransaction.start(path)
    old.write_rows(rows(0, 0))
    old.commit({END0: 1})  # the table is kept open at its last version
    shutil.rmtree(path)
    create_table(path, SCHEMA, "partition", {"lakelog.count": "2"})
    new = RsTransaction.start(path)
    new.write_rows(rows(1, 0))
    new.commit({END1: 1})
    txn = RsTransaction.start(path)
    assert txn.table_id() == DeltaTable(path).metadata().id != old.table_id()
    assert txn.configuration()["lakelog.count"] == "2" and txn.app_version(END0) == -1
    assert [f["partitionValues"] for f in txn.files()] == [{"partition": "1"}]


def test_the_checkpoint_due_is_written_after_the_commit_or_left_to_a_deferring_thread(tmp_path):
    """delta-rs would write it inside the commit; lakelog writes it after (Delta's interval), or
    leaves it to the deferral of a thread that defers (a server's pool), as Spark's engine does."""
    from log_store import checkpoints

    path = str(tmp_path / "t")
    create_table(path, SCHEMA, "partition", {"delta.checkpointInterval": "3"})
    log = Path(path, "_delta_log")
    RsTransaction.start(path).commit({END0: 1})
    RsTransaction.start(path).commit({END0: 2})
    assert not list(log.glob("*.checkpoint.parquet"))
    RsTransaction.start(path).commit({END0: 3})  # version 3
    assert [f.name for f in log.glob("*.checkpoint.parquet")] == [f"{3:020d}.checkpoint.parquet"]

    class Deferral:
        def __init__(self) -> None:
            self.due: list[tuple[str, int, int]] = []

        def committed(self, path: str, version: int, interval: int) -> None:
            self.due.append((path, version, interval))

    deferral = Deferral()
    checkpoints.defer_here(deferral)
    try:
        for v in (4, 5, 6):
            RsTransaction.start(path).commit({END0: v})
    finally:
        checkpoints.defer_here(None)
    assert len(list(log.glob("*.checkpoint.parquet"))) == 1
    assert (6, 3) in [(v, i) for _p, v, i in deferral.due]
    assert RsTransaction.start(path).snapshot_app_versions() == {END0: 6}
