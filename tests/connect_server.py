"""A local Spark Connect server for the tests of what lakelog does through Spark Connect: a Spark
driver of its own, in a process of its own, with Delta's jars and session extension and without
lakelog's jar (as a serverless cluster runs), sized for a small machine (``local[2]``).

A classic session and a Connect server cannot share a process (one JVM, one SparkContext), so the
server is started as ``python -m tests.connect_server PORT`` and serves until its standard input
closes; ``ConnectServer`` starts one and stops it, and ``session()`` is a Connect client to it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from log_store.config import SparkSettings
from log_store.session import JVM_JAR, session_conf

PROJECT = Path(__file__).resolve().parents[1]
READY = "lakelog-connect-ready"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_conf(port: int) -> dict[str, str]:
    """The server's settings: those of lakelog's own sessions (``session_conf``: Delta's jars,
    extension and catalog, Python workers on this interpreter) with Delta's log store and without
    lakelog's jar, as a serverless cluster runs; few partitions, for a small machine."""
    master, conf = session_conf(SparkSettings(log_store="delta"))
    jars = [j for j in conf["spark.jars"].split(",") if Path(j).name != JVM_JAR]
    conf.update({
        "spark.master": master or "local[2]",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.jars": ",".join(jars),
        "spark.driver.extraClassPath": os.pathsep.join(jars),
        "spark.executor.extraClassPath": os.pathsep.join(jars),
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.driver.python": sys.executable,
    })
    return conf


def serve(port: int) -> None:
    """Start the server, say so on standard output, and serve until standard input closes."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in server_conf(port).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(READY, flush=True)
    sys.stdin.read()
    spark.stop()


class ConnectServer:
    """A server process for a test session; ``session()`` is a new Connect client session to it."""

    def __init__(self, start_timeout: float = 180.0) -> None:
        self.port = free_port()
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.started_in: float | None = None  # seconds from launch to the first client answer

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def __enter__(self) -> "ConnectServer":
        began = time.monotonic()
        # The server's Python workers import lakelog (the data source's classes are pickled by reference)
        path = os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.connect_server", str(self.port)], cwd=PROJECT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = ""
        while READY not in line:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited ({self.proc.returncode}) before it served")
            if time.monotonic() - began > self.start_timeout:
                self.__exit__()
                raise RuntimeError(f"the Spark Connect server did not start within {self.start_timeout} s")
        # the JVM writes to the same pipe: drained, so a full pipe never stops the server
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        probe = self.session()
        try:
            probe.range(1).collect()
        finally:
            probe.stop()  # a client left open retries its release against a stopped server for minutes
        self.started_in = time.monotonic() - began
        return self

    def session(self):
        from pyspark.sql.connect.session import SparkSession as RemoteSession

        return RemoteSession.builder.remote(self.url).create()

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


if __name__ == "__main__":
    serve(int(sys.argv[1]))
