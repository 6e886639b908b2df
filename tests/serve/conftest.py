"""A lakelog server over the test's root, serving from a thread of the test process (its Spark
session is the suite's)."""

from __future__ import annotations

import time

import pytest

# the scenario module's checks report their values on failure, as a test module's do
pytest.register_assert_rewrite("tests.serve.group_resize")


@pytest.fixture()
def served(spark, root):
    from serve.server import Server
    from serve.settings import ServeSettings

    # KIP-848's members heartbeat every half second (Kafka's default: 5 s), so a rebalance takes seconds
    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5,
                                               consumer_heartbeat_interval_ms=500)).run_in_thread()
    yield server
    stopped_with_no_task_left(server)


@pytest.fixture()
def serve_with(spark, root):
    """``serve_with(**settings)``: a server with those settings, in a thread of the test process,
    stopped at the test's end."""
    from serve.server import Server
    from serve.settings import ServeSettings

    started = []

    def start(**settings):
        server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5, **settings)).run_in_thread()
        started.append(server)
        return server

    yield start
    for server in started:
        stopped_with_no_task_left(server)


def stopped_with_no_task_left(server) -> None:
    """Stop a server serving from a thread, and check its loop kept no task unfinished: a task left
    pending is destroyed with the loop, its cleanup never run ("Task was destroyed but it is pending")."""
    import asyncio

    loop = server._loop
    server.stop_thread()
    left = [t.get_coro() for t in asyncio.all_tasks(loop) if not t.done()]
    assert not left, f"tasks left pending when the server stopped: {left}"


@pytest.fixture()
def lagging(spark, root):
    """A server whose group commit waits a second: a producer's requests wait for their answers far
    longer than on a quick server, and back up behind them."""
    from serve.server import Server
    from serve.settings import ServeSettings

    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=1000,
                                               consumer_heartbeat_interval_ms=500)).run_in_thread()
    yield server
    stopped_with_no_task_left(server)


def bootstrap(server) -> str:
    return f"127.0.0.1:{server.port}"


class ServerProcess:
    """A server in a process of its own (tests/serve/server_worker.py), to be killed."""

    def __init__(self, root: str, node_id: int, env: dict[str, str] | None = None, **settings) -> None:
        import json
        import os
        import subprocess
        import sys

        from tests.support import PROJECT

        args = [f"{k}={v}" for k, v in settings.items()]
        self.proc = subprocess.Popen([sys.executable, str(PROJECT / "tests" / "serve" / "server_worker.py"), root,
                                      str(node_id), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=PROJECT, env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the server process did not start: {self.proc.stderr.read()[-3000:]}")
        self.port = json.loads(line)["port"]

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        import signal

        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def keys_across_a_grow(staying: int) -> tuple[list[bytes], bytes]:
    """``staying`` keys that stay in partition 0 when one partition grows to two, and one key the
    grow moves to partition 1 (the gate tests' keys)."""
    from log_store.partitioner import partition_for

    names = [b"k%d" % i for i in range(100)]
    return [k for k in names if partition_for(k, 2) == 0][:staying], next(k for k in names if partition_for(k, 2) == 1)


def poll_committing(consumer, count: int, seconds: float = 40) -> list[tuple[int, int]]:
    """(partition, offset) of up to ``count`` records a confluent-kafka ``consumer`` polls within
    ``seconds``, committing each one's offset + 1 after it, as an application that commits after
    processing does (what opens lakelog's resize gates)."""
    from confluent_kafka import TopicPartition

    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got.append((msg.partition(), msg.offset()))
            consumer.commit(offsets=[TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)],
                            asynchronous=False)
    return got


def poll_into(consumer, got: list, seconds: float, until: int | None = None) -> list[tuple[int, int, bytes]]:
    """Poll a confluent-kafka ``consumer`` for ``seconds`` (or until ``got`` holds ``until``
    records), adding each record's (partition, offset, key) to ``got``; commits nothing."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (until is None or len(got) < until):
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append((msg.partition(), msg.offset(), msg.key()))
    return got


def two_members(boot: str, group: str, seconds: float = 60) -> tuple[list, list[list], int]:
    """Two confluent-kafka members of ``group`` on topic ``t`` (2 partitions), each assigned one
    (a server with an initial rebalance delay joins both in one generation): the members, what each
    polled while joining (at most one record each), and the index of the one holding partition 0.
    Commits nothing."""
    from confluent_kafka import Consumer

    settings = {"bootstrap.servers": boot, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "partition.assignment.strategy": "range"}
    members = [Consumer({**settings, "client.id": f"{group}-c{i}"}) for i in range(2)]
    for member in members:
        member.subscribe(["t"])
    got: list[list] = [[], []]
    deadline = time.monotonic() + seconds
    while not all(len(m.assignment()) == 1 for m in members):
        assert time.monotonic() < deadline, [m.assignment() for m in members]
        for member, into in zip(members, got):
            if not member.assignment():  # an assigned member polled on delivers what the test has yet to see
                poll_into(member, into, 0.2, until=len(into) + 1)
    return members, got, next(i for i, m in enumerate(members) if m.assignment()[0].partition == 0)


def serve_without_jvm(root=None, conf=None, env=None, log=None) -> tuple:
    """``lakelog serve`` on a local root (or the root of the configuration file ``conf``) in a
    process (and process group) of its own with ``LAKELOG_NO_JVM=1``, where any use of Spark's
    session fails the request that made it: the process, its address, and the seconds it took to
    listen. ``env``: the environment to start from (default this process's); ``log``: a file for
    its standard error (a long run's warnings would fill a pipe no one reads until it stops)."""
    import json
    import os
    import subprocess
    import sys
    import time

    from tests.support import PROJECT

    env = {**(os.environ if env is None else env), "LAKELOG_NO_JVM": "1", "PYTHONPATH": str(PROJECT)}
    where = ["--conf", str(conf)] if conf is not None else ["--root", str(root)]
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", *where, "serve", "--listen", "127.0.0.1:0",
                             "--json"], cwd=PROJECT, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.PIPE if log is None else open(log, "w"),
                            start_new_session=True, env=env)
    line = proc.stdout.readline()
    assert "listening" in line, (proc.stderr.read() if log is None else open(log).read()) if proc.poll() is not None else line
    return proc, json.loads(line)["listening"], time.monotonic() - began


def stop_serving(proc) -> str:
    """Stop a server of ``serve_without_jvm``: its standard error (empty when in a log file)."""
    import os
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    return err or ""
