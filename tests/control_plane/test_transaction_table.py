"""The ``transactions`` table's cost and size do not grow with its history: one id's row is read
from the few files that can hold its version (counted, and timed at N and 20 N rows), and the
compaction step keeps each id's latest row, recent history and rows recorded while it ran, and
forgets ids idle past Kafka's ``transactional.id.expiration.ms``. delta-rs only: no JVM starts."""

from __future__ import annotations

import random
import statistics
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest

from control_plane.fast_sql import FastSql
from control_plane.layout import RootLayout
from control_plane.tables import TABLES, ControlTables
from control_plane.transactions import compaction
from control_plane.transactions import table as table_module
from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import TransactionRow, utcnow
from control_plane.transactions.table import TABLE, TransactionTable, latest_rows, version_app_id
from log_store.errors import ProducerFencedError
from log_store.frames import arrow_rows
from log_store.rs_engine import RsTransaction
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)

IDS = 50


def bulk(spark, root: str, total: int, files: int = 40) -> list[str]:
    """``total`` rows written straight into the table (``IDS`` ids of Kafka Streams' length, each
    at versions 1..total/IDS, shuffled into ``files`` files in one commit), then merged by a
    compaction step as the observer would. Each id's last version is Ongoing."""
    tables = ControlTables(spark, RootLayout(root))
    tables.ensure_table(TABLE)
    ids = [f"streams-app-{uuid.uuid4()}-{k}" for k in range(IDS)]  # past Delta's 32-character bounds
    per = total // IDS
    states = [TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    rows = [TransactionRow(transactional_id=t, producer_id=f"p-{t}", epoch=v // 3, version=v,
                           state=TxnState.ONGOING if v == per else states[v % 3],
                           partitions={"out": [v % 16]}).row()
            for t in ids for v in range(1, per + 1)]
    random.Random(7).shuffle(rows)
    txn = tables.rows_transaction(TABLE)
    step = -(-len(rows) // files)
    for start in range(0, len(rows), step):
        txn.write_rows(arrow_rows(spark, rows[start:start + step], TABLES[TABLE]))
    txn.commit({version_app_id(t): per for t in ids})
    assert compaction.compact(TransactionTable(tables)) is not None
    return ids


def fresh(spark, root: str) -> TransactionCoordinator:
    """A coordinator that has read nothing yet (as another process's): no row kept in memory."""
    table_module._KEPT.clear()
    return TransactionCoordinator(spark, root)


def measured(spark, root: str, tid: str) -> dict:
    """What reading ``tid``'s row read, and the median time of that read and of an EndTxn, each
    from a process that had read nothing."""
    reads, ends, counted = [], [], None
    for _ in range(3):
        coord = fresh(spark, root)
        began = time.perf_counter()
        row = coord.table.get(tid)
        reads.append(time.perf_counter() - began)
        counted = counted or dict(coord.table.reads)  # the first: a row of the compacted files
        assert row is not None and row.state == TxnState.ONGOING
        coord = fresh(spark, root)
        began = time.perf_counter()
        ended = coord.end_txn(tid, row.epoch, commit=True)
        ends.append(time.perf_counter() - began)
        assert ended.state == TxnState.COMPLETE_COMMIT
        coord.add_partitions(tid, ended.epoch, {"out": [0]})  # Ongoing again for the next round
    return {"reads": counted, "get": statistics.median(reads), "end": statistics.median(ends)}


def test_a_row_read_and_an_end_cost_the_same_at_twenty_times_the_rows(spark, tmp_path):
    small, large = 5_000, 100_000
    figures = {}
    for n in (small, large):
        root = str(tmp_path / f"root-{n}")
        ids = bulk(spark, root, n)
        figures[n] = measured(spark, root, ids[IDS // 2])
    print(figures)
    for n in (small, large):
        reads = figures[n]["reads"]
        assert 1 <= reads["files"] <= 2, figures  # only files whose version bounds hold the row
        assert reads["rows"] <= 2 * compaction.FILE_ROWS, figures
    assert figures[large]["reads"]["files"] <= figures[small]["reads"]["files"] + 1
    # times are noisy on a shared machine: a bound far below the ratio of sizes (20)
    assert figures[large]["get"] < 5 * figures[small]["get"] + 0.05, figures
    assert figures[large]["end"] < 5 * figures[small]["end"] + 0.1, figures


@pytest.fixture()
def coord(spark, tmp_path):
    return TransactionCoordinator(spark, str(tmp_path / "root"))


def transactions(coord: TransactionCoordinator, tid: str, n: int, commit: bool = True) -> TransactionRow:
    row = coord.init_producer_id(tid)
    for _ in range(n):
        coord.add_partitions(tid, row.epoch, {"absent": [0]})
        row = coord.end_txn(tid, row.epoch, commit=commit)
    return row


def table_files(coord: TransactionCoordinator) -> int:
    txn = RsTransaction.start(coord.table.path)
    try:
        return txn.file_count()
    finally:
        txn.release()


def views(root: str) -> tuple[list, list]:
    sql = FastSql(root)
    return (sql.query("SELECT transactional_id, version, state FROM transaction_history ORDER BY 1, 2", 10_000),
            sql.query("SELECT transactional_id, version, state FROM transactions ORDER BY 1", 10_000))


def test_compaction_keeps_latest_rows_and_history_within_the_retention(coord, tmp_path):
    for tid in ("t1", "t2", "t3"):
        transactions(coord, tid, 3)
    mid = utcnow()
    time.sleep(0.01)
    transactions(coord, "t1", 2)
    before = latest_rows(coord.table.rows())
    recent = sorted((r["transactional_id"], r["version"]) for r in coord.table.rows() if r["changed_at"] >= mid)
    assert recent and len(coord.table.rows()) > len(recent) + 3

    done = compaction.compact(coord.table, retention_ms=3_600_000, now=mid + timedelta(hours=1))
    assert done is not None and done.dropped_rows > 0 and not done.forgotten
    rows = coord.table.rows()
    kept = sorted((r["transactional_id"], r["version"]) for r in rows)
    assert kept == sorted(set(recent) | {(t, r.version) for t, r in before.items()})
    assert latest_rows(rows) == before
    table_module._KEPT.clear()
    assert coord.table.latest() == before and coord.table.get("t2") == before["t2"]
    history, latest = views(str(tmp_path / "root"))
    assert [(r["transactional_id"], r["version"]) for r in history] == kept
    assert [(r["transactional_id"], r["version"], r["state"]) for r in latest] == [
        (t, r.version, r.state.value) for t, r in sorted(before.items())]
    assert table_files(coord) == 1


def test_the_observer_tick_merges_the_small_files(coord):
    transactions(coord, "t1", compaction.MERGE_FILES // 3 + 1)
    before = latest_rows(coord.table.rows())
    assert table_files(coord) >= compaction.MERGE_FILES
    coord.tick()
    assert table_files(coord) == 1
    assert latest_rows(coord.table.rows()) == before
    assert len(coord.table.rows()) >= compaction.MERGE_FILES  # within the retention: all kept


def test_an_id_idle_past_expiration_is_forgotten_and_starts_anew(coord):
    old = transactions(coord, "idle", 2)
    busy = coord.init_producer_id("busy")
    coord.add_partitions("busy", busy.epoch, {"absent": [0]})  # Ongoing: never forgotten
    done = compaction.compact(coord.table, now=utcnow() + timedelta(days=8))
    assert done is not None and done.forgotten == ["idle"]
    table_module._KEPT.clear()
    assert coord.table.get("idle") is None and coord.table.get("busy").state == TxnState.ONGOING
    assert {r["transactional_id"] for r in coord.table.rows()} == {"busy"}
    again = coord.init_producer_id("idle")  # a new producer id; the versions go on
    assert again.version == old.version + 1 and again.producer_id != old.producer_id and again.epoch == 0
    with pytest.raises(ProducerFencedError):
        coord.add_partitions("idle", old.epoch, {"absent": [0]}, producer_id=old.producer_id)


def test_a_version_recorded_while_compacting_survives(coord, monkeypatch):
    row = transactions(coord, "t1", compaction.MERGE_FILES // 3 + 1)
    sorted_out = compaction._sorted_out
    racing = {}

    def meanwhile(*args, **kwargs):  # after the step read its snapshot, before it commits
        racing["row"] = coord.add_partitions("t1", row.epoch, {"absent": [1]})
        return sorted_out(*args, **kwargs)

    monkeypatch.setattr(compaction, "_sorted_out", meanwhile)
    assert compaction.compact(coord.table, retention_ms=0) is not None
    table_module._KEPT.clear()
    assert coord.table.get("t1") == racing["row"]
    assert {r["version"] for r in coord.table.rows()} == {row.version, racing["row"].version}


def test_forgetting_an_id_loses_to_its_initialisation_meanwhile(coord, monkeypatch):
    transactions(coord, "t1", 1)
    sorted_out = compaction._sorted_out
    racing = {}

    def meanwhile(*args, **kwargs):
        racing["row"] = coord.init_producer_id("t1")
        return sorted_out(*args, **kwargs)

    monkeypatch.setattr(compaction, "_sorted_out", meanwhile)
    rows = len(coord.table.rows())
    assert compaction.compact(coord.table, now=utcnow() + timedelta(days=8)) is None  # lost: tried next time
    table_module._KEPT.clear()
    assert coord.table.get("t1") == racing["row"] and len(coord.table.rows()) == rows + 1


def test_serve_reads_the_row_once_per_step(spark, tmp_path, monkeypatch):
    from serve.settings import ServeSettings
    from serve.transactions import Transactions
    from serve.txn_ids import kafka_producer_id

    served = Transactions(SimpleNamespace(spark=spark, root=str(tmp_path / "root"), settings=ServeSettings()))
    row = served.init("t1", 60_000)
    pid = kafka_producer_id(row.producer_id)
    reads = []
    lookup = served.coordinator.table.lookup
    monkeypatch.setattr(served.coordinator.table, "lookup", lambda tid: reads.append(tid) or lookup(tid))
    served.add_partitions("t1", pid, row.epoch, {"absent": [0]})
    assert len(reads) == 1
    served.end("t1", pid, row.epoch, commit=True, learns_bump=True)
    assert len(reads) == 2


def test_a_forgotten_ids_older_rows_in_other_files_go_with_it(coord):
    transactions(coord, "idle", 2)
    other = coord.init_producer_id("other")
    coord.add_partitions("other", other.epoch, {"absent": [0]})  # Ongoing: kept
    later = utcnow() + timedelta(days=8)
    month = 30 * 86_400_000
    assert compaction.compact(coord.table, expiration_ms=month, now=later).forgotten == []  # one file, just pruned
    transactions(coord, "idle", 1)  # its rows in new files; its older latest row in the pruned one
    done = compaction.compact(coord.table, now=later + timedelta(hours=1))
    assert done is not None and done.forgotten == ["idle"]
    assert {r["transactional_id"] for r in coord.table.rows()} == {"other"}


COMPACTING = """
import sys, time
from control_plane.layout import RootLayout
from control_plane.tables import ControlTables
from control_plane.transactions import compaction
from control_plane.transactions.table import TransactionTable
from log_store.session import LazySession

table = TransactionTable(ControlTables(LazySession(lambda: sys.exit("a JVM was started")), RootLayout(sys.argv[1])))
steps = 0
open(sys.argv[2] + ".ready", "w").close()
while not __import__("os").path.exists(sys.argv[2]):
    steps += compaction.compact(table, retention_ms=0) is not None  # every file, every time
    time.sleep(0.01)
print(steps)
"""


def test_rows_recorded_while_another_process_compacts_survive(coord, tmp_path):
    import os
    import subprocess
    import sys

    row = transactions(coord, "t1", 1)
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "LAKELOG_NO_JVM": "1"}
    other = subprocess.Popen([sys.executable, "-c", COMPACTING, str(tmp_path / "root"), str(stop)], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        while not (tmp_path / "stop.ready").exists() and other.poll() is None:
            time.sleep(0.05)
        last, i, until = {}, 0, time.monotonic() + 3
        while i < 12 or time.monotonic() < until:
            tid = f"t{i % 2 + 1}"
            last[tid] = transactions(coord, tid, 1)
            i += 1
    finally:
        stop.touch()
        out, _ = other.communicate(timeout=120)
    assert other.returncode == 0 and int(out) > 0, "the other process compacted"
    table_module._KEPT.clear()
    assert latest_rows(coord.table.rows()) == last == fresh(coord.tables.spark, str(tmp_path / "root")).table.latest()
    assert row.version < last["t1"].version


def test_string_bounds_cut_to_a_prefix_still_hold_the_value():
    long = "streams-app-0123456789abcdef0123456789-1"
    assert table_module.may_hold(long[:32], long[:32], long)  # a cut maximum without a tie-breaker
    assert table_module.may_hold("a", "b", "a-long") and not table_module.may_hold("b", "c", "a")
    assert not table_module.may_hold(None, long[:32], "t" + long)
    assert table_module.may_hold(1, 3, 2) and not table_module.may_hold(1, 3, 4)
