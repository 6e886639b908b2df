"""A local Spark Connect server: a Spark driver in a process of its own, with Delta's jars and
session extension and without lakelog's jar (as a serverless cluster runs), sized for a small
machine (``local[2]``). What ``make demo REMOTE=1`` and the tests of Spark Connect run against.

A classic session and a Connect server cannot share a process (one JVM, one SparkContext), so the
server is started as ``python -m log_store.connect_server serve PORT`` and serves until its
standard input closes; ``ConnectServer`` starts one and stops it, and ``session()`` is a Connect
client to it. ``python -m log_store.connect_server run COMMAND ...`` runs a command with
``SPARK_REMOTE`` pointing at a server started for it, and stops the server after.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from log_store.config import PROJECT_ROOT, SparkSettings
from log_store.session import JVM_JAR, REMOTE_ENV, session_conf

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
    """A server process, started on entering and stopped on leaving; ``session()`` is a new Connect
    client session to it."""

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
        path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop(REMOTE_ENV, None)  # the server is a classic session, not a client of another server
        self.proc = subprocess.Popen([sys.executable, "-m", "log_store.connect_server", "serve", str(self.port)],
                                     cwd=PROJECT_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
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


def run(command: list[str]) -> int:
    """Run ``command`` with ``SPARK_REMOTE`` set to a server started for it; its exit code."""
    with ConnectServer() as server:
        print(f"Spark Connect server at {server.url} (started in {server.started_in:.0f} s)", file=sys.stderr, flush=True)
        return subprocess.run(command, env={**os.environ, REMOTE_ENV: server.url}).returncode


USAGE = "usage: python -m log_store.connect_server serve PORT | run COMMAND [ARGS...]"

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    elif len(sys.argv) > 2 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2:]))
    else:
        sys.exit(USAGE)
