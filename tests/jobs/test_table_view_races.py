"""``lakelog topics table``'s ownership claim (pipelines/spark/table_view.py) against a query already
running (a table rebuilt by ``--replace`` for another checkpoint while a query kept by the first one
takes its next micro-batch: ``--interval``, a query that runs on) and against another claim racing it."""

from __future__ import annotations

import multiprocessing
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.commands.stream import lakelog_error
from pipelines.spark.table_view import CHECKPOINT_PROP, COLUMNS, claim, start
from tests.jobs.test_table_view import _state


def _records(spark, path: str, rows: list[tuple[str, str, int]]) -> None:
    """Append records (key, value, offset) of topic ``prices`` partition 0 to a Delta table at ``path``."""
    df = spark.createDataFrame([(k.encode(), v.encode(), o) for k, v, o in rows], "key binary, value binary, offset bigint")
    df.selectExpr("key", "value", "CAST(NULL AS array<struct<key:string,value:binary>>) AS headers",
                  "current_timestamp() AS timestamp", "'prices' AS topic", "0 AS partition", "offset"
                  ).write.format("delta").mode("append").save(path)


def test_a_running_query_whose_table_was_replaced_for_another_checkpoint_merges_no_more(spark, tmp_path):
    src, table = str(tmp_path / "src"), str(tmp_path / "now")
    _records(spark, src, [("a", "1", 0)])
    stream = lambda: spark.readStream.format("delta").load(src).select(*COLUMNS)  # noqa: E731
    first = claim(spark, stream().schema, table, str(tmp_path / "ck1"), "prices", "id-1")
    start(stream(), table, str(tmp_path / "ck1"), claim_id=first).awaitTermination()  # the first query's first batch
    assert _state(table) == {"a": "1"}
    claim(spark, stream().schema, table, str(tmp_path / "ck2"), "prices", "id-1", replace=True)  # now ck2's
    assert _state(table) == {}
    _records(spark, src, [("b", "2", 1)])
    query = start(stream(), table, str(tmp_path / "ck1"), claim_id=first)  # its next micro-batch, as it runs on
    refused = None
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - refused: what this test wants
        refused = exc
    assert _state(table) == {}, "the query kept by ck1 merged into the table ck2 keeps"
    assert DeltaTable(table).metadata().configuration[CHECKPOINT_PROP].endswith("ck2")
    said = str(lakelog_error(refused)) if refused else ""
    assert "rebuilt (--replace) for the query with checkpoint" in said and said.count("\n") == 0, said


def _claim_in_a_process(table: str, checkpoint: str, hold: float, barrier, results) -> None:
    """One run's claim (a table already there: no JVM on a local disk), started with the other's; its
    first read of the table held ``hold`` seconds: both read before either commits (the window, made
    wide), and the one held longer goes on after the other committed."""
    from log_store import commits
    from pipelines.spark import table_view

    real, reads = commits.start, []

    def start_noting(spark, path, what="the table"):
        txn = real(spark, path, what)
        reads.append(txn.read_version)
        if len(reads) == 1:
            time.sleep(hold)
        return txn

    commits.start = start_noting
    barrier.wait()
    try:
        table_view.claim(None, None, table, checkpoint, "prices", "id-1")
        results.put((checkpoint, "claimed", reads))
    except table_view.TableViewOwnerError as exc:
        results.put((checkpoint, f"refused: {exc}", reads))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results.put((checkpoint, f"failed: {type(exc).__name__}: {exc}", reads))


def test_two_runs_claiming_a_table_without_an_owner_at_once_one_is_refused(tmp_path):
    """A table made before tables named their owner: two runs with different checkpoints, in two
    processes, both read "no owner"; the one that commits second must read again and be refused, not
    set its own checkpoint over the other's (two queries would merge into the table)."""
    ctx = multiprocessing.get_context("spawn")
    raced = 0
    for round_ in range(3):
        table = str(tmp_path / f"old{round_}")
        write_deltalake(table, pa.table({"key": [b"z"], "value": [b"0"]}))
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_in_a_process, args=(table, str(tmp_path / f"ck{n}"), hold, barrier, results))
                 for n, hold in ((1, 0.2), (2, 1.5))]
        for p in procs:
            p.start()
        outcomes = sorted(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(60)
        assert [o[1] for o in outcomes].count("claimed") == 1, outcomes
        refused = next(o for o in outcomes if o[1] != "claimed")
        assert refused[1].startswith("refused: ") and "is kept by the query with checkpoint" in refused[1], outcomes
        winner = next(o[0] for o in outcomes if o[1] == "claimed")
        assert DeltaTable(table).metadata().configuration[CHECKPOINT_PROP] == winner
        raced += outcomes[0][2][0] == outcomes[1][2][0]  # both read the same version: the window was hit
    assert raced, "the two claims never read the table at the same version: the race was not run"


def test_a_replace_landing_while_a_merge_runs_fails_the_merge_with_the_owners_error(spark, tmp_path):
    """The replace commits after the MERGE's transaction read the table and before it commits: the
    first time the MERGE reads its source, a Python worker (another process) runs the replace."""
    from pyspark.sql import functions as F

    from pipelines.spark.table_view import TableViewOwnerError, merge_batch

    table, marker = str(tmp_path / "now"), str(tmp_path / "replaced")
    src = str(tmp_path / "src")
    _records(spark, src, [("a", "1", 0)])
    batch = spark.read.format("delta").load(src).select(*COLUMNS)
    first = claim(spark, batch.schema, table, str(tmp_path / "ck1"), "prices", "id-1")
    ck2 = str(tmp_path / "ck2")

    @F.udf("binary")
    def replacing(value):
        import os

        from pipelines.spark.table_view import claim as claim_in_worker

        if not os.path.exists(marker):  # once: the source may be read more than once
            open(marker, "w").close()
            claim_in_worker(None, None, table, ck2, "prices", "id-1", replace=True)  # no JVM on a local disk
        return value

    with pytest.raises(TableViewOwnerError, match="rebuilt .--replace. for the query with checkpoint"):
        merge_batch(batch.withColumn("value", replacing("value")), table, first)
    assert _state(table) == {}, "the MERGE committed into the table ck2 keeps"
    assert DeltaTable(table).metadata().configuration[CHECKPOINT_PROP] == ck2
