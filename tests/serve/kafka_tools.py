"""Kafka 4.4's own command-line tools (Java), run against a server: the jars `make
test-kafka-clients` resolves from Maven Central (benchmarks/kafka-pom.xml, into .jars-kafka/)."""

from __future__ import annotations

import subprocess

from benchmarks.kafka_broker import java_command

TOOLS = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "configs": "org.apache.kafka.tools.ConfigCommand",
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "transactions": "org.apache.kafka.tools.TransactionsCommand",
}


def kafka(tool: str, *args: str, input: str | None = None, timeout: float = 120, check: bool = True) -> str:
    """``kafka-<tool>.sh ARGS``: its standard output; AssertionError with its output if it fails."""
    proc = subprocess.run([*java_command("256m", "-XX:TieredStopAtLevel=1"), TOOLS[tool], *args],
                          input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kafka-{tool} {args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout
