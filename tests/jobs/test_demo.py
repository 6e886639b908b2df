"""What `make demo` runs, as a user runs it: `lakelog demo` on the embedded default (local
Spark), twice on the same root (the README: it can be run again), and `make demo REMOTE=1`'s
wrapper, which starts a Spark Connect server for one command and stops it after."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

PROJECT = Path(__file__).resolve().parents[2]


def lakelog(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)})


@pytest.mark.long  # 100 s: two demos, each with its own JVM
def test_the_demo_runs_again_on_the_same_root(tmp_path):
    root = str(tmp_path / "root")
    runs = []
    for _ in range(2):
        proc = lakelog("--root", root, "demo", "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout))
    first, second = runs
    assert first["topic"] != second["topic"], "each run makes a topic of its own"
    for result in runs:
        assert result["checks"] and all(c["passed"] for c in result["checks"]), result["checks"]
        streamed = DeltaTable(f"{root}/streams/{result['topic']}").to_pyarrow_table(columns=["value"]).to_pylist()
        assert sorted(json.loads(bytes(r["value"]))["order"] for r in streamed) == list(range(4000))
    topics = {t["topic"] for t in json.loads(lakelog("--root", root, "topics", "list", "--json").stdout)}
    assert {first["topic"], second["topic"]} <= topics


@pytest.mark.long  # 30 s: a Spark Connect server's start
def test_connect_servers_run_wrapper_gives_the_command_a_server_and_its_exit_code(tmp_path):
    """``python -m log_store.connect_server run COMMAND``: the command sees ``SPARK_REMOTE`` of a
    server that answers while it runs; its exit code is the wrapper's; the server is gone after."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys\n"
        "from pyspark.sql.connect.session import SparkSession\n"
        "url = os.environ['SPARK_REMOTE']\n"
        "spark = SparkSession.builder.remote(url).create()\n"
        "print(url, spark.range(5).count(), flush=True)\n"
        "spark.stop()\n"
        "sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-m", "log_store.connect_server", "run", sys.executable, str(probe)],
                          capture_output=True, text=True, timeout=600, cwd=PROJECT,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert proc.returncode == 3, proc.stderr[-3000:]
    url, count = proc.stdout.split()
    assert url.startswith("sc://127.0.0.1:") and count == "5" and "Spark Connect server at" in proc.stderr
    port = int(url.rsplit(":", 1)[1])
    import socket

    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the server stopped with the command"
