"""A partition's transaction state kept by the log's own commits (log_store/txn_marks.py): a
transactional append opens the producer's mark at its first offset and raises its epoch, an
append below the partition's epoch is refused with nothing written, and one commit of markers
closes the marks, moves the log ends and fences the ended epoch. delta-rs only: the session here
may not start (using it fails the test), as under ``LAKELOG_NO_JVM=1``."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from log_store.errors import ProducerFencedError
from log_store.log_metadata import Mode, TopicLogMetadata
from log_store.rs_reader import arrow_table
from log_store.session import LazySession
from log_store.topic_log import TopicLog
from log_store.txn_markers import CONTROL_COLUMN, write_markers
from log_store.txn_marks import (Marker, Row, closed_mark, committed_view, open_mark, open_since,
                                 txn_epoch_app_id, txn_mark_app_id)
from tests.support import no_jvm  # noqa: F401 (fixture: no JVM may start)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture(params=["partitioned", "arrival"])
def log(tmp_path, request) -> TopicLog:
    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    made = TopicLog.create(spark, str(tmp_path / "log"), TopicLogMetadata.initial("t", 2), layout=request.param)
    yield made
    assert not spark.started


def rows(producer: str, partition: int, values: list[str], first_seq: int = 0) -> pa.Table:
    n = len(values)
    return pa.table({"partition": pa.array([partition] * n, pa.int32()), "key": pa.nulls(n, pa.binary()),
                     "value": [v.encode() for v in values], "headers": pa.nulls(n, HEADERS),
                     "timestamp": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, "producer_id": [producer] * n,
                     "sequence": list(range(first_seq, first_seq + n))})


def on_disk(log: TopicLog) -> set[str]:
    """Every file under the log's folder, the Delta log's too."""
    root = Path(log.path)
    return {str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()}


def read_back(log: TopicLog) -> list[dict]:
    table = DeltaTable(log.path).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def test_a_transactional_append_opens_the_mark_at_its_first_offset_and_a_second_keeps_it(log):
    log.append_rows(rows("plain", 0, ["a", "b"]), 2, {"plain": -1})
    log.append_rows(rows("tx", 0, ["c", "d"]), 2, {"tx": -1}, transactional={"tx": 3})
    known = log.app_versions()
    assert known[txn_mark_app_id("tx", 0)] == open_mark(2) and known[txn_epoch_app_id("tx", 0)] == 3
    assert txn_mark_app_id("tx", 1) not in known and txn_mark_app_id("plain", 0) not in known
    log.append_rows(rows("tx", 0, ["e"], first_seq=2), 2, {"tx": 1}, transactional={"tx": 3})
    assert log.app_versions()[txn_mark_app_id("tx", 0)] == open_mark(2), "the open mark stays at the first offset"
    assert log.log_end_offsets() == {0: 5, 1: 0}


def test_an_append_below_the_partitions_epoch_is_refused_and_writes_nothing(log):
    log.append_rows(rows("tx", 1, ["a"]), 2, {"tx": -1}, transactional={"tx": 4})
    before, files = log.app_versions(), on_disk(log)
    with pytest.raises(ProducerFencedError, match="epoch 3 is fenced: the partition has seen epoch 4"):
        log.append_rows(rows("tx", 1, ["zombie"], first_seq=1), 2, {"tx": 0}, transactional={"tx": 3})
    assert log.app_versions() == before and on_disk(log) == files, "no commit, no file written"


def test_markers_close_the_marks_move_the_log_ends_and_fence_the_ended_epoch(log):
    log.append_rows(rows("other", 0, ["x"]), 2, {"other": -1})
    log.append_rows(pa.concat_tables([rows("tx", 0, ["a"]), rows("tx", 1, ["b"], first_seq=1)]), 2, {"tx": -1},
                    transactional={"tx": 0})
    assert write_markers(log, "tx", 0, True, [0, 1], 2) == {0: 2, 1: 1}
    known = log.app_versions()
    assert log.log_end_offsets() == {0: 3, 1: 2}
    assert known[txn_mark_app_id("tx", 0)] == closed_mark(2) and known[txn_mark_app_id("tx", 1)] == closed_mark(1)
    assert known[txn_epoch_app_id("tx", 0)] == known[txn_epoch_app_id("tx", 1)] == 1
    markers = [r for r in read_back(log) if r[CONTROL_COLUMN] is not None]
    assert [(r["partition"], r["offset"], r["producer_id"], r["key"], r["value"], r[CONTROL_COLUMN]) for r in markers] \
        == [(0, 2, "tx", None, None, "commit"), (1, 1, "tx", None, None, "commit")]
    with pytest.raises(ProducerFencedError):  # the transaction's append, retried after its end
        log.append_rows(rows("tx", 0, ["late"], first_seq=2), 2, {"tx": 1}, transactional={"tx": 0})
    assert log.log_end_offsets() == {0: 3, 1: 2}
    assert write_markers(log, "tx", 0, True, [0, 1], 2) == {0: None, 1: None}, "a second call writes nothing"
    assert log.log_end_offsets() == {0: 3, 1: 2} and len(read_back(log)) == 5


def test_ordinary_appends_go_on_after_the_control_column_is_added(log):
    assert write_markers(log, "tx", 0, False, [0], 2) == {0: 0}  # a marker of nothing: the column is added
    log.append_rows(rows("plain", 0, ["a"]), 2, {"plain": -1})
    found = read_back(log)
    assert [(r["offset"], r[CONTROL_COLUMN]) for r in found if r["partition"] == 0] == [(0, "abort"), (1, None)]


def test_read_committed_delivers_committed_transactions_only(log):
    log.append_rows(rows("plain", 0, ["p0"]), 2, {"plain": -1})
    log.append_rows(rows("ab", 0, ["ab0"]), 2, {"ab": -1}, transactional={"ab": 0})
    log.append_rows(rows("co", 0, ["co0"]), 2, {"co": -1}, transactional={"co": 0})
    write_markers(log, "ab", 0, False, [0], 2)
    log.append_rows(rows("open", 0, ["op0"]), 2, {"open": -1}, transactional={"open": 0})
    write_markers(log, "co", 0, True, [0], 2)
    found = [r for r in read_back(log) if r["partition"] == 0]
    row_of = [Row(r["offset"], r["producer_id"], r["producer_id"] in ("ab", "co", "open"))
              for r in found if r[CONTROL_COLUMN] is None]
    markers = [Marker(r["offset"], r["producer_id"], r[CONTROL_COLUMN] == "commit")
               for r in found if r[CONTROL_COLUMN] is not None]
    known = log.app_versions()
    marks = {pid: known[txn_mark_app_id(pid, 0)] for pid in ("ab", "co", "open")}
    view = committed_view(row_of, markers, marks, log.log_end_offsets()[0])
    value = {r["offset"]: r["value"] for r in found}
    assert [value[o] for o in view] == [b"p0", b"co0"], "below the open transaction: no aborted rows, no markers"


def test_an_append_racing_the_markers_retries_and_is_refused(log, monkeypatch):
    """The markers commit between an open append's read and its commit: the append depends on the
    epoch it read, so it conflicts, reads again and is refused (its files never committed)."""
    import log_store.log_append as log_append

    log.append_rows(rows("tx", 0, ["a"]), 2, {"tx": -1}, transactional={"tx": 0})
    real, raced = log_append.check_dense, []

    def markers_first(*args, **kwargs):
        if not raced:
            raced.append(None)  # the markers' own commit passes here too
            raced[0] = write_markers(log, "tx", 0, False, [0], 2)
        return real(*args, **kwargs)

    monkeypatch.setattr(log_append, "check_dense", markers_first)
    with pytest.raises(ProducerFencedError):
        log.append_rows(rows("tx", 0, ["late"], first_seq=1), 2, {"tx": 0}, transactional={"tx": 0})
    assert raced == [{0: 1}] and log.log_end_offsets() == {0: 2, 1: 0}
    assert [r[CONTROL_COLUMN] for r in read_back(log) if r["partition"] == 0] == [None, "abort"]


def log_of_an_earlier_release(tmp_path, schema=None) -> tuple[TopicLog, LazySession]:
    """A one-partition log made without the control column (``schema``: RECORD_SCHEMA's columns
    but ``control``, or another), on a session that fails the test if it starts a JVM."""
    from log_store.table_create import create_table
    from log_store.topic_log import RECORD_SCHEMA

    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    path = str(tmp_path / "old")
    create_table(spark, path, schema or RECORD_SCHEMA, TopicLogMetadata.initial("t", 1).to_properties(), "partition")
    log = TopicLog(spark, path)
    log.ensure_log_ends([0])
    return log, spark


def test_markers_in_a_log_of_an_earlier_release_whose_values_are_not_null(tmp_path):
    """A log made before tombstones (value NOT NULL) and before markers: the first marker adds the
    control column, writes an empty value, and ordinary appends go on."""
    from pyspark.sql.types import StructField, StructType

    from log_store.topic_log import RECORD_SCHEMA

    not_null = StructType([StructField(f.name, f.dataType, False) if f.name == "value" else f
                           for f in RECORD_SCHEMA.fields])
    log, spark = log_of_an_earlier_release(tmp_path, not_null)
    log.append_rows(rows("tx", 0, ["a"]), 1, {"tx": -1}, transactional={"tx": 0})
    assert write_markers(log, "tx", 0, True, [0], 1) == {0: 1}
    log.append_rows(rows("plain", 0, ["b"]), 1, {"plain": -1})
    assert [(r["offset"], r["value"], r[CONTROL_COLUMN]) for r in read_back(log)] == \
        [(0, b"a", None), (1, b"", "commit"), (2, b"b", None)]
    assert not log.keeps_null_values() and not spark.started


def commit_actions(log: TopicLog) -> list[set[str]]:
    """The kinds of action of each commit file of the log, by version."""
    folder = Path(log.path) / "_delta_log"
    return [{next(iter(json.loads(line))) for line in f.read_text().splitlines() if line.strip()}
            for f in sorted(folder.glob("*.json"))]


def test_a_new_log_has_the_control_column_so_its_markers_change_no_schema(log):
    """Both layouts: ``control`` is in version 0's schema, and a marker is one commit of rows and
    marks, never a metadata commit that every open append would conflict with."""
    assert CONTROL_COLUMN in DeltaTable(log.path, version=0).schema().to_arrow().names
    log.append_rows(rows("tx", 0, ["a"]), 2, {"tx": -1}, transactional={"tx": 0})
    before = len(commit_actions(log))
    assert write_markers(log, "tx", 0, True, [0], 2) == {0: 1}
    after = commit_actions(log)
    assert len(after) == before + 1 and "metaData" not in after[-1] and "add" in after[-1]
    assert not any("metaData" in kinds for kinds in after[1:]), "no schema change after version 0"
    adds = arrow_table(DeltaTable(log.path).get_add_actions(flatten=True)).to_pydict()
    assert sorted(adds["null_count.control"]) == [0, 1], "its null count kept: a search for markers skips files"


def test_a_log_of_an_earlier_release_gets_the_column_once(tmp_path):
    old, _spark = log_of_an_earlier_release(tmp_path)
    assert CONTROL_COLUMN not in DeltaTable(old.path).schema().to_arrow().names
    for epoch in range(3):
        old.append_rows(rows("tx", 0, ["a"], first_seq=epoch), 1, {"tx": epoch - 1}, transactional={"tx": epoch})
        write_markers(old, "tx", epoch, epoch % 2 == 0, [0], 1)
    assert sum("metaData" in kinds for kinds in commit_actions(old)) == 2, "version 0 and the one column added"
    assert [r[CONTROL_COLUMN] for r in read_back(old)] == [None, "commit", None, "abort", None, "commit"]


def test_a_metadata_commit_racing_the_columns_add_makes_it_try_again(tmp_path, monkeypatch):
    """A resize or property commit lands between the marker's read of a log of an earlier release
    and its add of the column: delta-rs refuses to rebase the add over it; the add is tried again
    on the table as it is then, and the marker lands (it is no storage failure)."""
    from deltalake.table import TableAlterer

    old, spark = log_of_an_earlier_release(tmp_path)
    path = old.path
    old.append_rows(rows("tx", 0, ["a"]), 1, {"tx": -1}, transactional={"tx": 0})
    add, raced = TableAlterer.add_columns, []

    def racing_add(self, *args, **kwargs):
        if not raced:  # another process's metadata commit, after this table was opened
            raced.append(TopicLog(spark, path).set_metadata(TopicLog(spark, path).metadata()))
        return add(self, *args, **kwargs)

    monkeypatch.setattr(TableAlterer, "add_columns", racing_add)
    assert write_markers(old, "tx", 0, True, [0], 1) == {0: 1}
    assert raced and [r[CONTROL_COLUMN] for r in read_back(old)] == [None, "commit"]


def with_modes(log: TopicLog, modes: dict[int, Mode]) -> None:
    meta = log.metadata()
    log.set_metadata(meta.model_copy(update={"partitions": {
        p: pm.model_copy(update={"mode": modes.get(p, pm.mode), "end_offset": log.log_end_offsets()[p]
                                 if p in modes else pm.end_offset}) for p, pm in meta.partitions.items()}}))


def test_a_transaction_ends_in_a_marked_partition_with_a_marker_and_in_a_retired_one_without(log):
    """A transaction must always be endable: a marked (ReadOnly) partition takes its marker past
    the final log end; a retired one, whose rows are purged, has its mark closed and its epoch
    raised with no row; a partition the topic does not have is left alone."""
    log.append_rows(pa.concat_tables([rows("tx", 0, ["a"]), rows("tx", 1, ["b"], first_seq=1)]), 2, {"tx": -1},
                    transactional={"tx": 5})
    with_modes(log, {0: Mode.READ_ONLY, 1: Mode.NONE})
    assert write_markers(log, "tx", 5, False, [0, 1, 7], 2) == {0: 1, 1: None, 7: None}
    known = log.app_versions()
    assert known[txn_mark_app_id("tx", 0)] == closed_mark(1) and open_since(known[txn_mark_app_id("tx", 1)]) is None
    assert known[txn_epoch_app_id("tx", 0)] == known[txn_epoch_app_id("tx", 1)] == 6
    assert log.log_end_offsets() == {0: 2, 1: 1}, "the retired partition's log end did not move"
    assert [(r["partition"], r["offset"], r[CONTROL_COLUMN]) for r in read_back(log)] == \
        [(0, 0, None), (0, 1, "abort"), (1, 0, None)]
    assert write_markers(log, "tx", 5, False, [0, 1], 2) == {0: None, 1: None}, "ended: nothing more"


def test_a_retired_partition_alone_ends_in_a_commit_of_marks(log):
    log.append_rows(rows("tx", 1, ["b"]), 2, {"tx": -1}, transactional={"tx": 0})
    with_modes(log, {1: Mode.NONE})
    files = {f for f in on_disk(log) if not f.startswith("_delta_log")}
    assert write_markers(log, "tx", 0, True, [1], 2) == {1: None}
    assert open_since(log.app_versions()[txn_mark_app_id("tx", 1)]) is None
    assert {f for f in on_disk(log) if not f.startswith("_delta_log")} == files, "no data file written"
