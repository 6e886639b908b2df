"""The produce and consume jobs on a real standalone Spark cluster: a master and two workers,
started from the installed PySpark on 127.0.0.1, so nothing depends on local mode."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).parent
EXE = Path(sys.executable).parent / "lakelog"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listening on {port}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs = [subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(base / "master.log", "w"),
    )]
    _wait_port(port)
    workers = []
    for i in range(2):
        work = base / f"worker{i}"
        work.mkdir()
        workers.append(work)
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
             "--cores", "1", "--memory", "1g", "--host", "127.0.0.1", "--webui-port", "0", "--work-dir", str(work)],
            env=env, stdout=subprocess.DEVNULL, stderr=open(base / f"worker{i}.log", "w"),
        ))
    time.sleep(5)
    conf = base / "cluster.yaml"
    conf.write_text(
        f"root: {base / 'root'}\nspark:\n  mode: local\n  master: spark://127.0.0.1:{port}\n"
        "  conf:\n    spark.executor.memory: 1g\n    spark.executor.cores: '1'\n    spark.cores.max: '2'\n"
        "producer:\n  batch_size: 200\n"
    )
    yield conf, workers, base
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def lakelog(conf, *args):
    proc = subprocess.run([str(EXE), "--conf", str(conf), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.cluster
@pytest.mark.slow
def test_produce_and_consume_jobs_on_standalone_cluster(cluster, spark):
    conf, workers, base = cluster
    inp = base / "in.jsonl"
    inp.write_text("".join(json.dumps({"key": f"k{i % 7}", "value": str(i)}) + "\n" for i in range(500)))
    lakelog(conf, "topics", "create", "--topic", "c", "--partitions", "3")
    produced = json.loads(lakelog(conf, "produce", "--topic", "c", "--input", str(inp), "--json", "--producer-id", "cp"))
    assert produced["appended"] == 500 and produced["batches"] == 3
    sink = base / "sink"
    consumed = json.loads(lakelog(conf, "consume", "--topic", "c", "--group", "cg", "--output", str(sink), "--json"))
    assert consumed["records"] == 500
    # executors ran on both workers (each keeps an app-* directory per application it served)
    for work in workers:
        assert any(work.glob("app-*/*")), f"no executor ran on {work}"
    rows = spark.read.format("delta").load(str(sink)).select("key", "value", "sequence").collect()
    assert sorted(int(bytes(r["value"]).decode()) for r in rows) == list(range(500))
    assert all(r["sequence"] == int(bytes(r["value"]).decode()) for r in rows)
