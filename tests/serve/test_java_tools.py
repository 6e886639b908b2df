"""Kafka 4.4's Java command-line tools against lakelog serve: kafka-topics, the console producer
and consumer with a group, kafka-consumer-groups, kafka-configs and kafka-delete-records; what they
wrote and read compared with delta-rs, format("lakelog") and lakelog's own group and topic reads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.serve.conftest import bootstrap
from tests.serve.kafka_tools import kafka
from tests.support import PROJECT, log_rows

pytestmark = pytest.mark.kafka_clients


def lakelog(root: str, *args: str) -> dict | list:
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "--root", root, *args, "--json"], cwd=PROJECT,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out)


def test_console_producer_and_a_consumer_group_through_the_server_agree_with_lakelog(served, root, spark):
    boot = bootstrap(served)
    kafka("topics", "--bootstrap-server", boot, "--create", "--topic", "orders", "--partitions", "4")
    assert "PartitionCount: 4" in kafka("topics", "--bootstrap-server", boot, "--describe", "--topic", "orders")
    lines = [f"customer-{i % 9}:order-{i}" for i in range(300)]
    kafka("console-producer", "--bootstrap-server", boot, "--topic", "orders", "--reader-property", "parse.key=true",
          "--reader-property", "key.separator=:", input="\n".join(lines) + "\n")
    out = kafka("console-consumer", "--bootstrap-server", boot, "--topic", "orders", "--group", "billing",
                "--from-beginning", "--max-messages", "300", "--timeout-ms", "30000",
                "--formatter-property", "print.key=true", "--formatter-property", "print.partition=true")
    consumed = [line.split("\t") for line in out.strip().splitlines()]
    assert sorted(f"{k}:{v}" for _p, k, v in consumed) == sorted(lines)

    rows = log_rows(root, "orders")
    assert sorted((r["key"].decode(), r["value"].decode()) for r in rows) == sorted(tuple(x.split(":")) for x in lines)
    for key in {r["key"] for r in rows}:  # one partition per key, its records in the order produced
        mine = sorted((r for r in rows if r["key"] == key), key=lambda r: r["offset"])
        assert len({r["partition"] for r in mine}) == 1
        assert [int(r["value"].decode().split("-")[1]) for r in mine] == sorted(
            int(r["value"].decode().split("-")[1]) for r in mine)
    by_partition = {(p, f"{k}:{v}") for p, k, v in consumed}
    assert by_partition == {(f"Partition:{r['partition']}", f"{r['key'].decode()}:{r['value'].decode()}") for r in rows}

    from pipelines.spark import register

    register(spark, root)
    spark_rows = spark.read.format("lakelog").option("subscribe", "orders").load().collect()
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in spark_rows) == sorted(
        (r["partition"], r["offset"], r["key"], r["value"]) for r in rows)

    described = kafka("consumer-groups", "--bootstrap-server", boot, "--describe", "--group", "billing")
    theirs = {}
    for line in described.splitlines():
        cols = line.split()
        if cols and cols[0] == "billing":
            theirs[int(cols[2])] = int(cols[3])
    ours = {p["partition"]: p["committed_offset"] for p in lakelog(root, "groups", "describe", "--group", "billing")["partitions"]}
    ends = {p: max([r["offset"] + 1 for r in rows if r["partition"] == p], default=0) for p in range(4)}
    assert theirs == ours == ends


def test_topic_configs_partitions_and_delete_records_through_kafkas_admin_tools(served, root):
    boot = bootstrap(served)
    kafka("topics", "--bootstrap-server", boot, "--create", "--topic", "t", "--partitions", "2",
          "--config", "retention.ms=86400000")
    assert lakelog(root, "topics", "describe", "--topic", "t")["config"]["retention.ms"] == "86400000"
    kafka("configs", "--bootstrap-server", boot, "--alter", "--entity-type", "topics", "--entity-name", "t",
          "--add-config", "retention.bytes=1048576")
    shown = kafka("configs", "--bootstrap-server", boot, "--describe", "--entity-type", "topics", "--entity-name", "t")
    assert "retention.bytes=1048576" in shown and "retention.ms=86400000" in shown
    assert lakelog(root, "topics", "describe", "--topic", "t")["config"]["retention.bytes"] == "1048576"

    kafka("topics", "--bootstrap-server", boot, "--alter", "--topic", "t", "--partitions", "3")
    assert lakelog(root, "topics", "describe", "--topic", "t")["undeleted_partition_count"] == 3
    out = kafka("topics", "--bootstrap-server", boot, "--alter", "--topic", "t", "--partitions", "2", check=False)
    assert "INVALID_PARTITIONS" in out.upper() or "only grows" in out  # CreatePartitions only grows; shrinking is lakelog's
    assert lakelog(root, "topics", "describe", "--topic", "t")["undeleted_partition_count"] == 3

    kafka("console-producer", "--bootstrap-server", boot, "--topic", "t", "--producer-property", "partitioner.class="
          "org.apache.kafka.clients.producer.RoundRobinPartitioner", input="".join(f"v{i}\n" for i in range(30)))
    # Kafka's RoundRobinPartitioner may skip partitions (KAFKA-13359): cut the fullest one
    ends = {p["partition"]: p["latest_offset"] for p in lakelog(root, "topics", "describe", "--topic", "t")["partitions"]}
    fullest = max(ends, key=ends.get)
    assert ends[fullest] >= 5
    plan = {"partitions": [{"topic": "t", "partition": fullest, "offset": 5}], "version": 1}
    path = f"{root}-delete.json"
    with open(path, "w") as f:
        json.dump(plan, f)
    said = kafka("delete-records", "--bootstrap-server", boot, "--offset-json-file", path)
    described = lakelog(root, "topics", "describe", "--topic", "t")
    assert next(p for p in described["partitions"] if p["partition"] == fullest)["earliest_offset"] == 5, said[-600:]

    kafka("topics", "--bootstrap-server", boot, "--delete", "--topic", "t")
    assert "t" not in {t["topic"] for t in lakelog(root, "topics", "list")}
    assert "t" not in kafka("topics", "--bootstrap-server", boot, "--list").split()


def test_a_java_producer_cut_off_by_a_server_killed_mid_commit_lands_every_record_once(spark, root, tmp_path):
    """Kafka's idempotent Java producer keeps sending while its server is SIGKILLed after a commit it
    never answered; the producer retries to the restarted server: every line once, in order."""
    import socket
    import time

    from benchmarks.kafka_broker import java_command
    from control_plane.topics import TopicAdmin
    from log_store.crash import CRASH_ENV
    from tests.serve.conftest import ServerProcess
    from tests.serve.kafka_tools import TOOLS

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listen = f"127.0.0.1:{port}"
    TopicAdmin(spark, root).create("jobs", 1)
    dying = ServerProcess(root, 1, env={CRASH_ENV: "produce:after_commit@3"}, listen=listen, linger_ms=5)
    producer = subprocess.Popen(
        [*java_command("256m"), TOOLS["console-producer"], "--bootstrap-server", listen, "--topic", "jobs",
         "--producer-property", "enable.idempotence=true", "--producer-property", "acks=all",
         "--producer-property", "linger.ms=0", "--producer-property", "retry.backoff.ms=200",
         "--producer-property", "delivery.timeout.ms=120000"],
        # its warnings (reconnects while the server is down) to a file: a pipe read only at the end could fill
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "producer.err", "w"), text=True)
    sent = 0
    while dying.proc.poll() is None and sent < 500:  # one line at a time until the server dies
        producer.stdin.write(f"line-{sent}\n")
        producer.stdin.flush()
        sent += 1
        time.sleep(0.05)
    assert dying.wait() != 0, "the server never reached its third commit"
    again = ServerProcess(root, 1, listen=listen, linger_ms=5)
    try:
        for i in range(sent, sent + 20):
            producer.stdin.write(f"line-{i}\n")
        producer.stdin.close()
        assert producer.wait(180) == 0, (tmp_path / "producer.err").read_text()[-3000:]
    finally:
        again.stop()
    values = [r["value"].decode() for r in sorted(log_rows(root, "jobs"), key=lambda r: r["offset"])]
    assert values == [f"line-{i}" for i in range(sent + 20)]
    sequences = [r["sequence"] for r in sorted(log_rows(root, "jobs"), key=lambda r: r["offset"])]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
