"""Kafka's own applications against `lakelog serve`: a Kafka Connect worker in distributed mode
(4.3.1, with the file connectors: tests/serve/connect-pom.xml, into .jars-connect/) and Kafka
Streams 4.4 (tests/serve/streams-pom.xml, into .jars-streams/), resolved from Maven Central by
`make test-kafka-clients` on first use."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks.kafka_broker import PROJECT, java_command, resolved

HERE = Path(__file__).parent


def connect_jars() -> str:
    return resolved(HERE / "connect-pom.xml", PROJECT / ".jars-connect")


def streams_jars() -> str:
    return resolved(HERE / "streams-pom.xml", PROJECT / ".jars-streams")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, chars: int = 6000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


class JavaApp:
    """A Java application in a process of its own, started (and killed) again and again; its log
    (warnings and errors) in ``folder/NAME-N.err``, N counting its starts."""

    name = "app"
    fatal = ""  # a line of its log saying it can go no further, though its process lingers

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.starts = 0
        self.proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}-{self.starts}.err"

    def spawn(self, argv: list[str], **kwargs) -> subprocess.Popen:
        self.starts += 1
        self.proc = subprocess.Popen(argv, stderr=open(self.log, "wb"), **kwargs)
        return self.proc

    def describe(self) -> str:
        return tail(self.log)

    def until(self, what, timeout: float, why: str):
        """Wait for ``what()`` to be truthy and return it; AssertionError with the application's log
        if it exits or the time runs out first."""
        deadline = time.monotonic() + timeout
        while True:
            got = what()
            if got:
                return got
            assert not (self.fatal and self.fatal in tail(self.log, 10**7)), f"the {self.name} failed {why}:\n{self.describe()}"
            assert self.proc.poll() is None, f"the {self.name} exited ({self.proc.returncode}) {why}:\n{self.describe()}"
            assert time.monotonic() < deadline, f"timed out {why}:\n{self.describe()}"
            time.sleep(0.25)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class ConnectWorker(JavaApp):
    """One Kafka Connect worker in distributed mode, its three internal topics on ``bootstrap``
    (created by the worker, compacted as Connect requires), its REST API on a port of its own; its
    log in ``folder/worker-N.err``."""

    name = "worker"
    fatal = "Uncaught exception in herder work thread"  # the worker takes 45 s more to exit

    def __init__(self, folder: Path, bootstrap: str) -> None:
        super().__init__(folder)
        self.port = free_port()
        self.config = folder / "worker.properties"
        self.config.write_text("\n".join([
            f"bootstrap.servers={bootstrap}", "group.id=connect-lakelog",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic=connect-configs", "offset.storage.topic=connect-offsets",
            "status.storage.topic=connect-status", "config.storage.replication.factor=1",
            "offset.storage.replication.factor=1", "status.storage.replication.factor=1",
            "offset.storage.partitions=5", "status.storage.partitions=3",
            "offset.flush.interval.ms=500", f"listeners=http://127.0.0.1:{self.port}", "",
        ]))

    def start(self) -> None:
        self.spawn([*java_command("512m", "-XX:TieredStopAtLevel=1", classpath=connect_jars()),
                    "org.apache.kafka.connect.cli.ConnectDistributed", str(self.config)], stdout=subprocess.DEVNULL)

    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        """A call of the worker's REST API: its status and JSON answer; status 0 while nothing listens."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                text = answer.read()
                return answer.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            text = e.read()
            return e.code, json.loads(text) if text.startswith(b"{") else text.decode(errors="replace")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None

    def put_connector(self, name: str, config: dict[str, str], timeout: float = 120) -> None:
        """Create (or set) connector ``name`` through the REST API, once the worker has joined its
        group and read its config topic (before that it answers 409 or 500)."""
        answers = []

        def put():
            status, body = self.rest("PUT", f"/connectors/{name}/config", config)
            answers.append((status, body))
            return status in (200, 201)

        self.until(put, timeout, f"creating connector {name}: last answers {answers[-3:]}")


class StreamsApp(JavaApp):
    """tests/serve/java/CountByWord.java, one instance, its state in ``folder/state``; its log in
    ``folder/streams-N.err``; ``states``: the states it went through since it last started;
    ``tasks``: its active tasks while RUNNING. ``guarantee``: Kafka Streams' processing.guarantee
    (at_least_once or exactly_once_v2), ``commit_ms`` its commit.interval.ms."""

    name = "streams"

    def __init__(self, folder: Path, bootstrap: str, application_id: str, source: str, sink: str,
                 guarantee: str = "at_least_once", commit_ms: int = 500) -> None:
        super().__init__(folder)
        self.state_dir = folder / "state"
        self.args = [bootstrap, application_id, str(self.state_dir), source, sink, guarantee, str(commit_ms)]
        self.states: list[str] = []
        self.tasks: list[str] = []

    def start(self) -> None:
        self.states, self.tasks = [], []
        proc = self.spawn([*java_command("512m", "-XX:TieredStopAtLevel=1", classpath=streams_jars()),
                           str(HERE / "java" / "CountByWord.java"), *self.args], stdout=subprocess.PIPE, text=True)
        states = self.states

        def read() -> None:
            for line in proc.stdout:
                if line.startswith("{"):
                    event = json.loads(line)
                    if event["name"] == "state":
                        states.append(event["state"])
                    elif proc is self.proc:  # not a killed start's last words
                        self.tasks = event["tasks"]

        threading.Thread(target=read, daemon=True).start()

    def describe(self) -> str:
        return f"states {self.states}, tasks {self.tasks}:\n{tail(self.log)}"
