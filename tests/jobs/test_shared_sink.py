"""Names with dots and sinks that several groups write, from the CLI as a user runs it.

Group ``a`` on topic ``b.c`` and group ``a.b`` on topic ``c`` once shared their sink positions
(``lakelog.sink.a.b.c.0``): the second consume found the first one's position and wrote nothing,
exiting 0. The sink is read back with delta-rs, not with lakelog.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable as RsTable

from jobs.cli import cli
from log_store.engine import DeltaTransaction
from pipelines.consumer import Consumer

RECORDS = 60


@pytest.fixture()
def run(spark, root):
    runner = CliRunner()

    def invoke(*args):
        res = runner.invoke(cli, ["--root", root, *args], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return res

    return invoke


def _topics(run, tmp_path, *topics: str) -> None:
    for topic in topics:
        run("topics", "create", "--topic", topic, "--partitions", "1")
        lines = [json.dumps({"key": f"k{i % 7}", "value": f"{topic}:{i}"}) for i in range(RECORDS)]
        path = tmp_path / f"{topic}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        run("produce", "--topic", topic, "--input", str(path))


def _held(sink: str) -> Counter:
    rows = pa.table(RsTable(sink).to_pyarrow_table(columns=["topic", "partition", "offset"])).to_pylist()
    assert len({(r["topic"], r["partition"], r["offset"]) for r in rows}) == len(rows), "nothing twice"
    return Counter(r["topic"] for r in rows)


@pytest.mark.long
def test_group_a_on_b_c_and_group_a_b_on_c_both_deliver_everything_to_one_sink(run, tmp_path):
    _topics(run, tmp_path, "b.c", "c")
    sink = str(tmp_path / "S")
    first = json.loads(run("consume", "--topic", "b.c", "--group", "a", "--output", sink, "--json").stdout)
    second = json.loads(run("consume", "--topic", "c", "--group", "a.b", "--output", sink, "--json").stdout)
    assert (first["records"], second["records"]) == (RECORDS, RECORDS)
    assert _held(sink) == {"b.c": RECORDS, "c": RECORDS}
    again = json.loads(run("consume", "--topic", "b.c", "--group", "a", "--output", sink, "--json").stdout)
    assert again["records"] == 0, "each group resumes from its own positions"
    for topic, group in (("b.c", "a"), ("c", "a.b")):
        report = json.loads(run("audit", "--topic", topic, "--sink", sink, "--group", group, "--json").stdout)
        assert report["passed"], report


@pytest.mark.long
def test_two_groups_on_one_topic_into_one_sink_are_audited_group_by_group(run, tmp_path):
    """Each group delivers every record once: the sink holds each record twice, once per group,
    and the audit judges each group's commits on their own (no duplicate, nothing missing)."""
    _topics(run, tmp_path, "orders.v1", "orders")
    sink = str(tmp_path / "S")
    for group in ("billing.svc", "billing"):
        run("consume", "--topic", "orders.v1", "--group", group, "--output", sink)
    run("consume", "--topic", "orders", "--group", "billing", "--output", sink)
    assert _held_all(sink) == {"orders.v1": 2 * RECORDS, "orders": RECORDS}
    report = json.loads(run("audit", "--topic", "orders.v1", "--sink", sink, "--json").stdout)
    names = {c["name"] for c in report["checks"]}
    assert {"sink.no_duplicates[billing]", "sink.no_duplicates[billing.svc]"} <= names
    assert report["passed"], [c for c in report["checks"] if not c["passed"]]


def _held_all(sink: str) -> Counter:
    rows = pa.table(RsTable(sink).to_pyarrow_table(columns=["topic"])).to_pylist()
    return Counter(r["topic"] for r in rows)


@pytest.mark.long
def test_a_sink_of_an_earlier_release_carries_its_positions_over(spark, root, run, tmp_path):
    """A sink whose positions an earlier release wrote as ``lakelog.sink.<group>.<topic>.<p>``:
    group ``a`` resumes from its id on ``b.c``; group ``a.b`` on ``c``, whose id would read the
    same, does not take it (the sink holds no record of ``c`` below it) and delivers everything."""
    _topics(run, tmp_path, "b.c", "c")
    sink = str(tmp_path / "S")
    earlier = Consumer(spark, root, "b.c", "a")
    earlier.ensure_sink(sink)
    txn = DeltaTransaction.start(spark, sink)
    from pyspark.sql import functions as F
    from pipelines.consumer import RECORD_SCHEMA
    rows = earlier.log.read({0: (0, RECORDS)}).select(F.lit("b.c").alias("topic"), *RECORD_SCHEMA.fieldNames())
    txn.write(rows)
    txn.commit({"lakelog.sink.a.b.c.0": RECORDS})  # as an earlier release wrote it: no commit metadata

    second = json.loads(run("consume", "--topic", "c", "--group", "a.b", "--output", sink, "--json").stdout)
    assert second["records"] == RECORDS
    first = json.loads(run("consume", "--topic", "b.c", "--group", "a", "--output", sink, "--json").stdout)
    assert first["records"] == 0, "group a's position carried over from the earlier release's id"
    assert _held(sink) == {"b.c": RECORDS, "c": RECORDS}
