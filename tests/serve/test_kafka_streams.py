"""A Kafka Streams 4.4 application on `lakelog serve` (tests/serve/java/CountByWord.java,
at-least-once): it counts the words of a topic in a state store, through a repartition topic,
its store backed by a compacted changelog topic. Killed (SIGKILL) and its local state wiped, it
starts again and restores its store from the changelog: the counts go on from where they were."""

from __future__ import annotations

import shutil
import struct
import time

import pytest

from tests.serve.conftest import serve_without_jvm, stop_serving
from tests.serve.kafka_apps import StreamsApp
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients

WORDS = [f"word-{i:02d}" for i in range(12)]
APP = "countbyword"


def produced(i: int) -> tuple[str, str]:
    """The ``i``-th input record: a user and a word, the words counted unevenly."""
    return f"user-{i % 7}", WORDS[(i * i) % len(WORDS)]


def counts(records: range) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in records:
        word = produced(i)[1]
        out[word] = out.get(word, 0) + 1
    return out


def latest(root: str, topic: str) -> dict[str, int]:
    """Each word's last count in ``topic`` (Kafka's 8-byte longs), read with delta-rs: a word's
    counts are in one partition, in offset order."""
    rows = sorted(log_rows(root, topic), key=lambda r: (r["partition"], r["offset"]))
    return {r["key"].decode(): struct.unpack(">q", r["value"])[0] for r in rows}


def test_a_streams_app_killed_restores_its_counts_from_the_changelog(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    root = str(tmp_path / "root")
    proc, bootstrap, _took = serve_without_jvm(root)
    app = StreamsApp(tmp_path, bootstrap, APP, "words", "word-counts")
    first, second = range(600), range(600, 1000)

    def produce(records: range) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in records:
            user, word = produced(i)
            producer.produce("words", key=user, value=word)
        assert producer.flush(60) == 0

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("words", 3), NewTopic("word-counts", 3)]).values():
            f.result(30)
        produce(first)
        app.start()
        app.until(lambda: latest(root, "word-counts") == counts(first), 180, "counting the first records")
        time.sleep(2)  # the application commits (every 500 ms): nothing after this is processed again
        app.kill()
        shutil.rmtree(app.state_dir)  # the store can only come back from its changelog
        produce(second)
        app.start()
        app.until(lambda: "RUNNING" in app.states, 180, "restoring the store after the restart")
        everything = counts(range(1000))
        app.until(lambda: latest(root, "word-counts") == everything, 180, "counting the records after the restart")
        assert latest(root, f"{APP}-counts-changelog") == everything
    finally:
        app.stop()
        err = stop_serving(proc)
    assert "Traceback" not in err, err[-3000:]
