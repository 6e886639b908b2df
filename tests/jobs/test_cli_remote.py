"""The CLI's Spark jobs on a Spark Connect server (``--remote``, or ``SPARK_REMOTE`` as PySpark
reads it): real ``lakelog`` processes without a usable Java, so none can start Spark of its own,
against the local server of ``log_store/connect_server.py``; the results read with delta-rs."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from deltalake import DeltaTable

from log_store.connect_server import free_port
from tests.support import cli_without_java, log_rows

RECORDS = 25_000  # past what produce reads in Python (20,000): a Spark job reads the file
KEYS = 50


def _big_input(tmp_path) -> str:
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(json.dumps({"key": f"k{i % KEYS}", "value": str(i)}) + "\n" for i in range(RECORDS)))
    return str(path)


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_cli_spark_jobs_run_on_a_connect_server(connect_server, tmp_path):
    root, sink = str(tmp_path / "root"), str(tmp_path / "sink")
    _ok(cli_without_java(root, "topics", "create", "--topic", "orders", "--partitions", "4"))
    produced = _ok(cli_without_java(root, "--remote", connect_server.url, "produce", "--topic", "orders",
                                    "--input", _big_input(tmp_path), "--json", timeout=300))
    assert json.loads(produced.stdout)["records"] == RECORDS
    # SPARK_REMOTE, as PySpark reads it; the option after the verb works as before it
    consumed = _ok(cli_without_java(root, "consume", "--topic", "orders", "--group", "g", "--output", sink, "--json",
                                    timeout=300, env={"SPARK_REMOTE": connect_server.url}))
    assert json.loads(consumed.stdout)["records"] == RECORDS
    audit = _ok(cli_without_java(root, "audit", "--topic", "orders", "--sink", sink, "--json", "--remote",
                                 connect_server.url, timeout=300))
    assert json.loads(audit.stdout)["passed"] is True

    log = log_rows(root, "orders", ["partition", "offset", "key", "value"])
    assert sorted(int(r["value"]) for r in log) == list(range(RECORDS))
    per_partition = defaultdict(list)
    for r in log:
        per_partition[r["partition"]].append(r["offset"])
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_partition.values())
    delivered = DeltaTable(sink).to_pyarrow_table(columns=["partition", "offset", "key", "value"]).to_pylist()
    assert sorted(int(r["value"]) for r in delivered) == list(range(RECORDS))
    by_key = defaultdict(list)
    for r in sorted(delivered, key=lambda r: (r["partition"], r["offset"])):
        by_key[r["key"]].append(int(r["value"]))
    assert len(by_key) == KEYS and all(values == sorted(values) for values in by_key.values())


@pytest.mark.long  # 19 s, waiting out the connect timeout
def test_a_server_that_does_not_answer_is_a_clear_error(tmp_path):
    root, data = str(tmp_path / "root"), _big_input(tmp_path)
    _ok(cli_without_java(root, "topics", "create", "--topic", "orders", "--partitions", "2",
                         "--remote", "sc://127.0.0.1:1"))  # no Spark needed: none reached for
    nobody = f"sc://127.0.0.1:{free_port()}"
    proc = cli_without_java(root, "--remote", nobody, "produce", "--topic", "orders", "--input", data, timeout=120)
    assert proc.returncode == 1
    assert f"no Spark Connect server answers at {nobody}" in proc.stderr and "--remote" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = cli_without_java(root, "produce", "--topic", "orders", "--input", data, env={"SPARK_REMOTE": "http://host:1"})
    assert proc.returncode == 1 and "is no Spark Connect URL" in proc.stderr and "sc://host:port" in proc.stderr


@pytest.mark.long  # 40 s; the CLI's Spark jobs through Connect stay in the default suite
def test_the_demo_runs_through_a_connect_server(connect_server, tmp_path):
    """What ``make demo REMOTE=1`` runs: every step, the stream's format("lakelog") being the Python
    data source, with no JVM in lakelog's process; its audits pass."""
    root = str(tmp_path / "root")
    proc = _ok(cli_without_java(root, "--remote", connect_server.url, "demo", "--json", timeout=600))
    result = json.loads(proc.stdout)
    assert result["checks"] and all(c["passed"] for c in result["checks"]), result["checks"]
    streamed = DeltaTable(f"{root}/streams/{result['topic']}").to_pyarrow_table(columns=["value"]).to_pylist()
    orders = sorted(json.loads(bytes(r["value"]))["order"] for r in streamed)
    assert orders == list(range(4000)), "every order the demo produced, once"
