"""Kafka Streams 4.4 with ``processing.guarantee=exactly_once_v2`` on `lakelog serve`
(tests/serve/java/CountByWord.java): two instances count words while input keeps arriving, each
killed (SIGKILL) in the middle of a transaction that has written counts (after the application
committed at least once), and started again. Read through serve with read_committed, the output
holds each input record's effect exactly once: each word's committed counts are 1, 2, 3, ... with
no repeat and no gap, the last one the number of input records with that word; and the
application's committed positions on the input cover all of it."""

from __future__ import annotations

import threading
import time

import pytest

from tests.serve.conftest import serve_without_jvm, stop_serving
from tests.serve.kafka_apps import StreamsApp, tail
from tests.serve.test_kafka_streams import counts, produced

pytestmark = pytest.mark.kafka_clients

APP = "countbyword-eos"
INPUT, OUTPUT, PARTITIONS = "words", "word-counts", 3
BUDGET = 170  # seconds for the whole run, kills and restarts included
COMMIT_MS = 3000  # long transactions: a kill seen to fall while one appends lands before its commit


class Trickle(threading.Thread):
    """Produces the input (``produced(i)`` for i = 0, 1, ...) a few records at a time until told to
    stop, so the kills fall in the middle of the application's work; ``sent``: how many."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 20})
        self.sent = 0
        self.failed: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        def delivered(err, _msg):
            if err is not None:
                self.failed.append(str(err))

        while not self.stopping.is_set():
            for _ in range(5):
                user, word = produced(self.sent)
                self.producer.produce(INPUT, key=user, value=word, on_delivery=delivered)
                self.sent += 1
            self.producer.poll(0.1)

    def stop(self) -> int:
        """Stop producing; every record sent is delivered: how many."""
        self.stopping.set()
        self.join(30)
        assert self.producer.flush(60) == 0 and not self.failed, f"producing the input failed: {self.failed[:5]}"
        return self.sent


class Reader(threading.Thread):
    """Reads OUTPUT through serve in ``isolation`` (read_committed or read_uncommitted), from its
    start, as a consumer of Kafka would: ``seen`` holds (partition, offset, word, count) in the
    order read."""

    def __init__(self, bootstrap: str, isolation: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-{isolation}",
                                  "isolation.level": isolation, "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self.seen: list[tuple[int, int, str, int]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for m in self.consumer.consume(500, 0.2):
                if m.error():
                    self.errors.append(str(m.error()))
                else:
                    count = int.from_bytes(m.value(), "big", signed=True)  # Kafka's 8-byte long
                    self.seen.append((m.partition(), m.offset(), m.key().decode(), count))
        self.consumer.close()

    def latest(self) -> dict[str, int]:
        return {word: count for _p, _o, word, count in list(self.seen)}

    def ends(self) -> dict[int, int]:
        """Each partition's last offset read."""
        return {p: offset for p, offset, _w, _c in list(self.seen)}

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def not_exactly_once(seen: list[tuple[int, int, str, int]], expected: dict[str, int]) -> list[str]:
    """What the committed counts show wrong, word by word: each word's counts in offset order must
    be 1, 2, ..., its number of input records (a repeat: an effect counted twice; a gap: one lost)."""
    by_word: dict[str, list[int]] = {}
    for _p, _o, word, count in sorted(seen):
        by_word.setdefault(word, []).append(count)
    wrong = []
    for word in sorted(set(expected) | set(by_word)):
        got, want = by_word.get(word, []), expected.get(word, 0)
        first = next((i for i, count in enumerate(got) if count != i + 1), None)
        if first is not None:
            kind = "a repeat" if got[first] <= first else "a gap"
            wrong.append(f"{word}: committed count #{first + 1} is {got[first]} ({kind}); around it "
                         f"{got[max(0, first - 3):first + 4]}")
        elif len(got) != want:
            wrong.append(f"{word}: last committed count {len(got)}, but {want} input records")
    return wrong


def test_exactly_once_streams_killed_mid_run_count_each_input_once(tmp_path):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    began = time.monotonic()

    def left(most: float) -> float:
        return max(1.0, min(most, BUDGET - (time.monotonic() - began)))

    root, server_log = str(tmp_path / "root"), tmp_path / "serve.err"
    proc, bootstrap, _took = serve_without_jvm(root, log=server_log)
    apps = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        apps.append(StreamsApp(tmp_path / name, bootstrap, APP, INPUT, OUTPUT, "exactly_once_v2", COMMIT_MS))
    a, b = apps
    trickle = committed = uncommitted = None

    def running(app: StreamsApp, what):
        """``what``, failing at once if the other instance exited (StreamsApp.until watches its own)."""
        def check():
            for other in apps:
                if other is not app and other.proc is not None and other.proc.poll() is not None:
                    raise AssertionError(f"the other instance exited ({other.proc.returncode}):\n{other.describe()}")
            return what()
        return check

    def grew(beyond: int):
        return lambda: len(committed.seen) > beyond

    def appending(app: StreamsApp):
        """True once a partition of OUTPUT that one of ``app``'s tasks writes has records past its
        committed ones and more than at the last look: a transaction of ``app`` open and appending."""
        last: dict[int, int] = {}

        def check():
            owned = [int(t.split("_")[1]) for t in app.tasks if t.startswith("1_")] or range(PARTITIONS)
            done, ahead = committed.ends(), uncommitted.ends()
            growing = [p for p in owned if ahead.get(p, -1) > max(done.get(p, -1), last.get(p, 1 << 62))]
            last.update(ahead)
            return growing
        return check

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(INPUT, PARTITIONS), NewTopic(OUTPUT, PARTITIONS)]).values():
            f.result(30)
        committed, uncommitted = Reader(bootstrap, "read_committed"), Reader(bootstrap, "read_uncommitted")
        trickle = Trickle(bootstrap)
        for thread in (committed, uncommitted, trickle):
            thread.start()
        a.start()
        b.start()
        a.until(running(a, grew(0)), left(90), "before its first committed count")
        for app in (a, b):  # each killed inside a transaction that wrote counts, once the application committed
            app.until(running(app, appending(app)), left(30), f"before a transaction of tasks {app.tasks} wrote counts")
            before = len(committed.seen)
            app.kill()
            app.start()
            app.until(running(app, lambda app=app: "RUNNING" in app.states), left(60), "restarting after SIGKILL")
            app.until(running(app, grew(before + 20)), left(60), "committing after the restart")
        sent = trickle.stop()
        expected = counts(range(sent))
        try:
            a.until(running(a, lambda: committed.latest() == expected), left(60), f"counting all {sent} input records")
        except AssertionError as e:
            raise AssertionError(f"{e}\nread_committed so far: {not_exactly_once(committed.seen, expected)[:8]}") from None
        wrong = not_exactly_once(committed.seen, expected)
        assert not wrong, f"read_committed, the counts are not exactly once ({len(wrong)} words):\n" + "\n".join(wrong)
        for reader in (committed, uncommitted):
            assert not reader.errors, f"a consumer of {OUTPUT} was told: {reader.errors[:5]}"
        a.until(running(a, lambda: uncommitted.latest() == expected), left(20), f"reading {OUTPUT} read_uncommitted")
        assert len(uncommitted.seen) > len(committed.seen), \
            "no kill fell in a transaction that had written counts (read_uncommitted shows no aborted count)"

        group = Consumer({"bootstrap.servers": bootstrap, "group.id": APP, "enable.auto.commit": False})
        try:
            def positions() -> dict[int, tuple[int, int]]:
                out = group.committed([TopicPartition(INPUT, p) for p in range(PARTITIONS)], 10)
                return {tp.partition: (tp.offset, group.get_watermark_offsets(tp, 10)[1]) for tp in out}

            try:  # a partition no record went to has no position
                a.until(running(a, lambda: all(at == end or end == 0 for at, end in positions().values())), left(30),
                        f"committing the application's positions on {INPUT}")
            except AssertionError as e:
                raise AssertionError(f"{e}\n(committed position, end) by partition: {positions()}") from None
        finally:
            group.close()
    finally:
        for app in apps:
            app.stop()
        for thread in (trickle, committed, uncommitted):
            if thread is not None and thread.is_alive():
                thread.stopping.set()
                thread.join(10)
        err = stop_serving(proc)
    server_err = err + tail(server_log, 10**6)
    assert "Traceback" not in server_err, server_err[-3000:]
    assert time.monotonic() - began < 180, f"the run took {time.monotonic() - began:.0f} s"
