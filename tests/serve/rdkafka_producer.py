"""Kafka's VerifiableProducer, in librdkafka (confluent-kafka), for tests/serve/group_resize.py:
``rdkafka_producer.py BOOTSTRAP TOPIC KEYS THROUGHPUT [SETTING=VALUE ...]`` produces value ``str(n)``
with key ``str(n % KEYS)`` for n = 0, 1, ... at about THROUGHPUT records a second (librdkafka
settings as given, on top of an idempotent producer; ``partition=N`` addresses every record to
partition N, one sequence stream), printing the Java tool's JSON lines:
``producer_send_success`` with the partition and offset librdkafka was told, ``producer_send_error``;
on SIGTERM it flushes and prints ``shutdown_complete``."""

from __future__ import annotations

import json
import signal
import sys
import time

from confluent_kafka import Producer


def say(name: str, **fields) -> None:
    print(json.dumps({"name": name, "timestamp": int(time.time() * 1000), **fields}), flush=True)


def main() -> None:
    boot, topic, keys, throughput = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    settings = {"bootstrap.servers": boot, "enable.idempotence": True, **dict(a.split("=", 1) for a in sys.argv[5:])}
    addressed = {"partition": int(settings.pop("partition"))} if "partition" in settings else {}
    producer = Producer(settings)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))

    def report(err, msg) -> None:
        fields = {"topic": msg.topic(), "key": msg.key().decode(), "value": msg.value().decode()}
        if err is None:
            say("producer_send_success", partition=msg.partition(), offset=msg.offset(), **fields)
        else:
            say("producer_send_error", exception=err.name(), message=err.str(), **fields)

    say("startup_complete")
    began, n = time.monotonic(), 0
    while not stop:
        try:
            producer.produce(topic, key=str(n % keys), value=str(n), on_delivery=report, **addressed)
        except BufferError:  # librdkafka's queue is full: serve the reports, then the same record again
            producer.poll(0.1)
            continue
        n += 1
        producer.poll(max(0.0, began + n / throughput - time.monotonic()))
    unflushed = producer.flush(120)
    say("tool_data", sent=n, unflushed=unflushed)
    say("shutdown_complete")


if __name__ == "__main__":
    main()
