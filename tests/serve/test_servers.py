"""Several servers over one root: each lists the others as brokers, partitions' leaders spread over
them, and a group's coordinator killed moves its group to another server with its offsets intact."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import ServerProcess, bootstrap

pytestmark = pytest.mark.kafka_clients
# short enough for the takeover to be quick, long enough that a loaded machine never makes a live
# server look silent (each beat is a commit into the root)
QUICK = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def test_a_killed_coordinator_moves_its_group_to_another_server_with_its_offsets(spark, root):
    other = ServerProcess(root, 1, linger_ms=5, **QUICK)
    local = Server(spark, root, ServeSettings(listen="127.0.0.1:0", node_id=2, linger_ms=5, **QUICK)).run_in_thread()
    try:
        boot_other, boot_local = f"127.0.0.1:{other.port}", bootstrap(local)
        KafkaAdminClient(bootstrap_servers=boot_local).create_topics([NewTopic("orders", 4, 1)])
        deadline = time.monotonic() + 30
        while {b.node_id for b in local.brokers()} != {1, 2}:  # each sees the other through the root
            assert time.monotonic() < deadline, local.brokers()
            time.sleep(0.2)
        for boot in (boot_local, boot_other):  # either server lists both, with the leaders spread over them
            while True:
                meta = KafkaAdminClient(bootstrap_servers=boot).describe_topics(["orders"])[0]
                if {p["leader_id"] for p in meta["partitions"]} == {1, 2}:
                    break
                assert time.monotonic() < deadline, meta
                time.sleep(0.3)

        producer = KafkaProducer(bootstrap_servers=[boot_local, boot_other], enable_idempotence=True)
        for i in range(200):
            producer.send("orders", key=b"k%d" % (i % 10), value=b"%d" % i)
        producer.flush()

        # the group's coordinator is the other server, as if it were the first asked (a client
        # sends FindCoordinator to whichever server it knows is least loaded, so either may be)
        assert local.cluster.registry.take_lease("g", 1, None) == (1, 1)
        first = KafkaConsumer("orders", bootstrap_servers=boot_other, group_id="g", auto_offset_reset="earliest",
                              enable_auto_commit=False, consumer_timeout_ms=5000)
        read = [m for m in first][:120]
        assert len(read) >= 120
        first.commit({tp: __import__("kafka").OffsetAndMetadata(o + 1, None, -1) for tp, o in _last(read).items()})
        first.close(autocommit=False)
        assert local.cluster.registry.lease("g")[0] == 1
        other.kill()  # SIGKILL: no down row, its lease left behind
        # until its heartbeat is older than the session, Metadata still lists node 1, as Kafka's
        # controller does a killed broker; kafka-python's poll then raises on its refused
        # connection (a client's retry, not the server's concern), so the group is asked after that
        deadline = time.monotonic() + 30
        while {b.node_id for b in local.brokers()} != {2}:
            assert time.monotonic() < deadline, local.brokers()
            time.sleep(0.2)

        second = KafkaConsumer("orders", bootstrap_servers=[boot_other, boot_local], group_id="g",
                               auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20000)
        rest = [m for m in second]
        second.close()
        assert local.cluster.registry.lease("g")[0] == 2  # taken over once node 1 was silent past its session
        seen = {(m.partition, m.offset) for m in read} | {(m.partition, m.offset) for m in rest}
        assert len(seen) == 200 and not ({(m.partition, m.offset) for m in read} & {(m.partition, m.offset) for m in rest})
    finally:
        other.stop()
        local.stop_thread()


def _last(messages):
    from kafka import TopicPartition

    out = {}
    for m in messages:
        tp = TopicPartition(m.topic, m.partition)
        out[tp] = max(out.get(tp, -1), m.offset)
    return out


def test_a_client_knocking_while_a_server_starts_is_refused_or_answered_never_dropped(spark, root, monkeypatch):
    """A server started again on its port (after a kill -9, as the fault campaign does) registers
    in the root before it takes a connection: a client knocking meanwhile is refused and retries,
    never accepted by a server that cannot yet name itself in Metadata and then dropped."""
    import socket
    import threading

    from serve.cluster import Cluster
    from tests.serve.raw import RawClient

    register = Cluster.register

    def slow(self, *args, **kwargs):  # a registration's commit on a busy machine
        time.sleep(2)
        return register(self, *args, **kwargs)

    monkeypatch.setattr(Cluster, "register", slow)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    answered, dropped, stop = [], [], threading.Event()

    def knock() -> None:
        while not stop.is_set():
            try:
                client = RawClient(port, timeout=30)
            except OSError:  # refused: nobody listening yet
                time.sleep(0.02)
                continue
            try:
                meta = client.call(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
                answered.append(sorted(int(b.node_id) for b in meta.brokers))
            except (AssertionError, OSError) as exc:
                dropped.append(repr(exc))
            finally:
                client.close()

    knocker = threading.Thread(target=knock, daemon=True)
    knocker.start()
    server = Server(spark, root, ServeSettings(listen=f"127.0.0.1:{port}", node_id=7, linger_ms=5)).run_in_thread()
    try:
        deadline = time.monotonic() + 30
        while len(answered) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        knocker.join(30)
        server.stop_thread()
    assert dropped == [] and answered and all(a == [7] for a in answered), (dropped[:3], answered[:3])


def test_a_server_whose_whole_process_group_gets_sigterm_says_so_in_one_line(root):
    """A service manager stopping a process group (systemd's control-group stop, timeout(1)) sends
    SIGTERM to Spark's JVM too, whose shutdown hook may stop the session before the server marks
    itself down: the server says so in one line and exits 1, or marks itself down and exits 0;
    never a traceback."""
    import os
    import signal
    import subprocess
    import sys

    from tests.support import PROJECT

    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "--root", root, "serve", "--listen", "127.0.0.1:0", "--json"],
                            cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "LAKELOG_SPARK_PROFILE": "small"})
    try:
        line = proc.stdout.readline()
        assert "listening" in line, proc.stderr.read() if proc.poll() is not None else line
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err, err[-3000:]
    assert proc.returncode == 0 or (proc.returncode == 1 and "without marking itself down in the root" in err
                                    and "process group" in err), (proc.returncode, err[-2000:])
