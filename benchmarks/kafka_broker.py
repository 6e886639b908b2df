"""A Kafka broker on this machine as a yardstick: one KRaft node (broker and controller), started
and stopped here, with Kafka's own producer and consumer performance tools (JVM clients, the
fastest there are), so lakelog's figures can be read against what a data team would run instead.

Kafka 4.4.0's jars come from Maven Central (``benchmarks/kafka-pom.xml``, resolved into
``.jars-kafka/`` on first use; never committed). ``measure(records, record_bytes, partitions)``
creates a topic, produces ``records`` of ``record_bytes`` (acks=1, Kafka's default batching) and
consumes them back; it returns records per second each way.

Run alone: ``.venv/bin/python benchmarks/kafka_broker.py [RECORDS] [PARTITIONS]``.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
JARS = PROJECT / ".jars-kafka"
POM = PROJECT / "benchmarks" / "kafka-pom.xml"


TOOLS_LOG = PROJECT / "conf" / "log4j2-kafka-tools.properties"


def jars() -> str:
    """The class path of Kafka's broker and tools."""
    return resolved(POM, JARS)


def resolved(pom: Path, folder: Path) -> str:
    """The class path of ``pom``'s dependencies, resolved with Maven into ``folder`` once per
    version of the pom (``.resolved`` holds the pom it was resolved from)."""
    stamp = folder / ".resolved"
    if not stamp.exists() or stamp.read_text() != pom.read_text():
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["mvn", "-q", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={folder}"],
                       check=True)
        stamp.write_text(pom.read_text())
    return f"{folder}/*"


def java_command(heap: str = "256m", *options: str, classpath: str | None = None) -> list[str]:
    """The start of a command that runs a class of Kafka's jars (or of ``classpath``): its warnings
    and errors (through log4j's SLF4J binding, ``TOOLS_LOG``) on standard error, with stack traces,
    so a tool that stops says why; standard output stays the tool's own."""
    return ["java", f"-Xmx{heap}", f"-Dlog4j2.configurationFile={TOOLS_LOG}", *options, "-cp", classpath or jars()]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _java(*args: str, heap: str = "512m", **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*java_command(heap), *args], capture_output=True, text=True, **kwargs)


class Broker:
    """One KRaft node in a temporary folder; ``bootstrap`` is its address."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="lakelog-kafka-"))
        self.broker_port, self.controller_port = _port(), _port()
        self.bootstrap = f"127.0.0.1:{self.broker_port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Broker":
        config = self.folder / "server.properties"
        config.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.broker_port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{self.bootstrap}", "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.folder / 'data'}", "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false", ""]))
        formatted = _java("kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()).replace("-", "")[:22],
                          "-c", str(config))
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
        self.process = subprocess.Popen([*java_command("1g"), "kafka.Kafka", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while _java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--list").returncode:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Kafka broker did not start")
            time.sleep(1)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(60)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def measure(self, records: int, record_bytes: int, partitions: int) -> dict[str, float]:
        """Produce then consume ``records`` on a new topic of ``partitions``: records per second each way."""
        return measure(self.bootstrap, records, record_bytes, partitions)


def failure(proc: subprocess.CompletedProcess) -> str:
    """A Kafka tool's own words on why it failed: TopicCommand prints its error on standard output,
    its logged warnings and stack traces go to standard error (``java_command``); SLF4J's own
    notices, if any, say nothing about the failure and are left out."""
    lines = (proc.stdout + proc.stderr).splitlines()
    said = "\n".join(line for line in lines if line.strip() and not line.startswith("SLF4J:"))
    return said[-3000:] or f"exit status {proc.returncode} and no message"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A new topic of ``partitions`` through Kafka's TopicCommand; RuntimeError with the tool's reason."""
    created = _java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
                    "--topic", topic, "--partitions", str(partitions), "--replication-factor", "1")
    if created.returncode:
        raise RuntimeError(f"creating topic {topic} on {bootstrap} failed: {failure(created)}")


def measure(bootstrap: str, records: int, record_bytes: int, partitions: int, acks: str = "1",
            throughput: int = -1, topic: str | None = None, producer_props: Sequence[str] = (),
            consume: bool = True, tool_args: Sequence[str] = ()) -> dict[str, float]:
    """Kafka's ProducerPerformance then ConsumerPerformance against ``bootstrap`` (a broker, or
    ``lakelog serve``) on a new topic of ``partitions`` (named ``topic``, made here): records per
    second each way, and the producer's latency (average, p50, p99, ms; at ``throughput`` records a
    second, -1: unlimited). ``producer_props`` are more producer settings, ``tool_args`` more of
    ProducerPerformance's own options (``--transactional-id``...); ``consume`` False skips the
    consumer."""
    topic = topic or f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    produced = _java("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
                     "--record-size", str(record_bytes), "--throughput", str(throughput),
                     *tool_args, "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}",
                     *producer_props, heap="1g")
    found = re.findall(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                       r"[\d.]+ ms max latency, (\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th", produced.stdout)
    if not found:
        raise RuntimeError(f"ProducerPerformance: {failure(produced)}")
    _n, rate, mb_s, avg, p50, p99 = found[-1]
    figures = {"produce_rec_s": float(rate), "produce_mb_s": float(mb_s), "produce_avg_ms": float(avg),
               "produce_p50_ms": float(p50), "produce_p99_ms": float(p99)}
    for name, value in re.findall(r"^producer-metrics:(txn-[a-z-]+-time-ns-total):\{[^}]*\}\s*:\s*([\d.]+)",
                                  produced.stdout, re.M):  # with --print-metrics: time in each transaction call
        figures[f"{name[:-len('-ns-total')]}_ms"] = float(value) / 1e6
    if not consume:
        return figures
    consumed = _java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                     "--topic", topic, "--messages", str(records), "--timeout", "60000", heap="1g")
    lines = [line for line in consumed.stdout.splitlines() if line and line[0].isdigit()]
    if not lines:
        raise RuntimeError(f"ConsumerPerformance: {failure(consumed)}")
    header = next(line for line in consumed.stdout.splitlines() if "nMsg.sec" in line)
    row = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in lines[-1].split(",")]))
    if int(row["data.consumed.in.nMsg"]) < records:  # timed out: its rate would be of part of the topic
        raise RuntimeError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of {records} records: "
                           f"{failure(consumed)}")
    figures["consume_rec_s"] = float(row["nMsg.sec"])
    if "fetch.nMsg.sec" in row:  # the rate after the group's first rebalance (ConsumerPerformance's own split)
        figures |= {"consume_fetch_rec_s": float(row["fetch.nMsg.sec"]), "consume_rebalance_ms": float(row["rebalance.time.ms"])}
    return figures

if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    parts = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    with Broker() as broker:
        print(broker.measure(n, 120, parts))
