"""The benchmarks' driving of Kafka's tools (benchmarks/kafka_broker.py, benchmarks/serve.py,
benchmarks/transactions.py) against stand-ins that answer as Kafka 4.4's TopicCommand,
ProducerPerformance and ConsumerPerformance do: each topic made once, the tools' figures read, and
a tool's failure reported in its own words."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import kafka_broker, serve, transactions

SLF4J = ('SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n'
         "SLF4J: Defaulting to no-operation (NOP) logger implementation\n")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


class Tools:
    """Kafka's tools as they answer: errors of TopicCommand on standard output, SLF4J's notice on
    standard error every time; ``consumed`` records read back (None: all asked for)."""

    def __init__(self, consumed: int | None = None) -> None:
        self.topics: list[str] = []
        self.consumed = consumed
        self.produced: tuple[str, ...] = ()  # ProducerPerformance's last arguments

    def __call__(self, main: str, *args: str, heap: str = "512m") -> subprocess.CompletedProcess:
        arg = dict(zip(args, args[1:]))
        if main.endswith("TopicCommand"):
            topic = arg["--topic"]
            if topic in self.topics:
                return self._done(1, f"Error while executing topic command : Topic '{topic}' already exists.\n")
            self.topics.append(topic)
            return self._done(0, f"Created topic {topic}.\n")
        if main.endswith("ProducerPerformance"):
            self.produced = args
            n = int(arg["--num-records"])
            metrics = ("\nMetric Name                                                                  Value\n"
                       "producer-metrics:txn-begin-time-ns-total:{client-id=perf-producer-client}  : 1500000.000\n"
                       "producer-metrics:txn-commit-time-ns-total:{client-id=perf-producer-client} : 600000000.000\n"
                       if "--print-metrics" in args else "")
            return self._done(0, f"{n // 2} records sent, 4000.0 records/sec (0.46 MB/sec), 200.1 ms avg latency, "
                                 f"700.0 ms max latency.\n{n} records sent, 51234.567890 records/sec (5.86 MB/sec), "
                                 "120.45 ms avg latency, 900.00 ms max latency, 100 ms 50th, 300 ms 95th, "
                                 f"450 ms 99th, 800 ms 99.9th.\n{metrics}")
        if main.endswith("ConsumerPerformance"):
            n = int(arg["--messages"]) if self.consumed is None else self.consumed
            return self._done(0, f"{CONSUMER_HEADER}\n2026-11-28 17:40:00:000, 2026-11-28 17:40:05:000, 57.2205, "
                                 f"11.4441, {n}, 98765.4321, 300, 4700, 12.1746, 106382.9787\n")
        raise AssertionError(f"unexpected tool {main}")

    @staticmethod
    def _done(code: int, out: str) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess([], code, stdout=out, stderr=SLF4J)


@pytest.fixture
def tools(monkeypatch) -> Tools:
    fake = Tools()
    monkeypatch.setattr(kafka_broker, "_java", fake)
    return fake


def test_the_serve_benchmark_makes_each_topic_once_and_reads_both_tools_figures(tools):
    figures = serve.perf("127.0.0.1:1", 1000, 16, "all")
    assert tools.topics == [figures["topic"]]
    assert figures["produce_rec_s"] == pytest.approx(51234.56789)
    assert (figures["produce_avg_ms"], figures["produce_p50_ms"], figures["produce_p99_ms"]) == (120.45, 100, 450)
    assert figures["consume_rec_s"] == pytest.approx(98765.4321)


def test_producer_settings_and_a_steady_rate_measure_the_producer_only(tools):
    figures = serve.perf("127.0.0.1:1", 1000, 16, "1", serve.OBJECT_STORE_PRODUCER)
    assert "consume_rec_s" not in figures and len(tools.topics) == 1
    assert serve.steady("127.0.0.1:1", 16, 5000, 10) == {"rate": 5000, "p50_ms": 100, "p99_ms": 450}
    assert len(tools.topics) == 2


def test_a_topic_that_cannot_be_made_is_reported_with_the_tools_reason_not_slf4js_notice(tools):
    kafka_broker.create_topic("127.0.0.1:1", "orders", 4)
    with pytest.raises(RuntimeError, match="creating topic orders on 127.0.0.1:1 failed: .*already exists") as err:
        kafka_broker.create_topic("127.0.0.1:1", "orders", 4)
    assert "SLF4J" not in str(err.value)


def test_a_consumer_that_read_only_part_of_the_topic_is_an_error_not_a_rate(monkeypatch):
    monkeypatch.setattr(kafka_broker, "_java", Tools(consumed=400))
    with pytest.raises(RuntimeError, match="read 400 of 1000 records"):
        kafka_broker.measure("127.0.0.1:1", 1000, 120, 4)


def test_the_transactions_benchmark_runs_the_tool_in_transactions_and_counts_them_by_their_markers(tools, monkeypatch):
    # 1,000 records into 4 partitions and 3 transactions, each writing to all 4: 12 markers
    monkeypatch.setattr(transactions, "end_offsets", lambda _b, _t, _p: [253, 252, 251, 256])
    figures = transactions.transactional_perf("127.0.0.1:1", 1000, 4, 100, keys=10_000)
    options = dict(zip(tools.produced, tools.produced[1:]))
    assert options["--transaction-duration-ms"] == "100" and options["--transactional-id"].startswith("perf-")
    assert (options["--key-distribution"], options["--record-key-range"]) == ("random", "10000")
    assert options["--num-records"] == "1000" and "acks=all" in tools.produced
    assert (figures["markers"], figures["transactions"]) == (12, 3)
    assert figures["produce_mb_s"] == 5.86
    assert figures["txn_s"] == pytest.approx(3 / (1000 / 51234.56789), rel=0.01)
    assert figures["commit_avg_ms"] == 200.0  # 600 ms in commitTransaction over 3 transactions


def test_the_transactions_benchmark_counts_a_last_short_transaction_that_missed_partitions(tools, monkeypatch):
    monkeypatch.setattr(transactions, "end_offsets", lambda _b, _t, _p: [252, 252, 251, 258])  # 8 + 5 markers
    assert transactions.transactional_perf("127.0.0.1:1", 1000, 4, 1000, keys=0)["transactions"] == 4
    assert "--key-distribution" not in tools.produced
