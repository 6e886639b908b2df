"""An acknowledgement says where the record is (docs/serve.md, "Placement"). A Kafka client reports
each record of a batch at the partition it addressed and the answer's base offset plus the
record's place in the batch. With a topic's ``lakelog.placement`` ``client`` every record stays
where the client addressed it, so what Java's producer, librdkafka (its default partitioner) and
sarama (its default FNV-1a partitioner) report holds that very record, stale metadata or not.
With ``key`` (the default) keyed records follow their key's murmur2 hash under the count the server
commits with, and a batch not wholly where it was addressed is answered -1, Kafka's "offset
unknown": no client is told a place that holds another record (librdkafka and sarama number a
batch's records from -1 on, so they are checked with one record a batch: docs/serve.md)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from control_plane.controller import TopicController
from control_plane.settings import ControllerSettings
from tests.serve.conftest import bootstrap, stopped_with_no_task_left
from tests.serve.line_clients import java_producers, sarama_producer
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients
KEYS = 24


class Clients:
    """Java's producer (Kafka's default partitioner, and a custom one sending every record to the
    last partition it knows of), librdkafka with its default partitioner (``consistent_random``:
    CRC32) and sarama with its default (FNV-1a), each sending every key and two unkeyed records a
    round; Java's and sarama's do not refresh their metadata during the test (librdkafka may: it
    asks again every second for a topic its metadata cache dropped). ``one_record_batches``:
    librdkafka and sarama send one record a request."""

    def __init__(self, boot: str, topic: str, folder, one_record_batches: bool = False) -> None:
        self.java = java_producers(boot, topic, folder)
        self.sarama = sarama_producer(boot, topic, folder, "-refresh", "1h",
                                      *(["-max-messages", "1"] if one_record_batches else []))
        self.rdkafka = Producer({"bootstrap.servers": boot, "linger.ms": 5, "topic.metadata.refresh.interval.ms": 3_600_000,
                                 **({"batch.num.messages": 1} if one_record_batches else {})})
        self.topic = topic
        self.rdkafka_acks: list[dict] = []
        self.sent = 0

    def start(self) -> None:
        for name in ("kafka", "last"):
            self.java.ask(f"new {name} 3600000{' kafka' if name == 'kafka' else ''}", "count")

    def round(self) -> None:
        for k in [*range(KEYS), None, None]:
            key = "-" if k is None else f"k{k}"
            for client in ("kafka", "last", "rdkafka", "sarama"):
                value = f"{client}|{key}|{self.sent}"
                self.sent += 1
                if client == "rdkafka":
                    self.rdkafka.produce(self.topic, key=None if k is None else key, value=value,
                                         on_delivery=self._delivered)
                elif client == "sarama":
                    self.sarama.tell(f"send {key} {value}")
                else:
                    self.java.tell(f"send {client} {key} {value} -")
        for name in ("kafka", "last"):
            self.java.ask(f"flush {name}", "flushed")
        assert self.rdkafka.flush(60) == 0
        self.sarama.ask("flush", "flushed")

    def _delivered(self, err, msg) -> None:
        self.rdkafka_acks.append({"event": "failed" if err else "acked", "value": msg.value().decode(),
                                  "partition": msg.partition(), "error": str(err),
                                  "offset": -1 if msg.offset() is None else msg.offset()})  # None: a negative offset

    def acks(self) -> list[dict]:
        """Every send's outcome, as each client reported it."""
        return [*self.java.outcomes, *self.rdkafka_acks, *self.sarama.outcomes]

    def close(self) -> None:
        self.java.close()
        self.sarama.close()


def told(root: str, topic: str, acks: list[dict]) -> dict[str, list[dict]]:
    """Every acknowledgement checked against the log (read with delta-rs): a reported (partition,
    offset) holds that very record; the acknowledgements of offset -1 (unknown) by client."""
    assert [a for a in acks if a["event"] != "acked"] == []
    rows = {(r["partition"], r["offset"]): r for r in log_rows(root, topic)}
    assert len(rows) == len(acks) == len({a["value"] for a in acks})
    unknown: dict[str, list[dict]] = {}
    for a in acks:
        if a["offset"] == -1:
            unknown.setdefault(a["value"].split("|")[0], []).append(a)
            continue
        row = rows.get((a["partition"], a["offset"]))
        assert row is not None and row["value"].decode() == a["value"], (a, row)
        key = a["value"].split("|")[1]
        assert row["key"] == (None if key == "-" else key.encode())
    return unknown


def test_with_client_placement_every_client_is_told_where_each_record_is_across_a_grow(spark, served, root, tmp_path):
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("t", 4, 1, config={"lakelog.placement": "client"})])["t"].result(60)
    clients = Clients(boot, "t", tmp_path)
    try:
        clients.start()
        clients.round()
        TopicController(spark, root).alter("t", 6)  # every client still addresses 4 partitions
        assert clients.java.count("kafka") == clients.sarama.count() == 4
        clients.round()
    finally:
        clients.close()
    acks = clients.acks()
    assert told(root, "t", acks) == {}  # every one says where its record is
    stale = [a for a in acks if not a["value"].startswith("rdkafka|")]  # each knows 4 partitions
    assert max(a["partition"] for a in stale) == 3  # kept where the stale clients addressed them
    assert {a["partition"] for a in acks if a["value"].startswith("last|")} == {3}


def test_with_key_placement_no_client_is_told_a_place_that_holds_another_record(spark, served, root, tmp_path):
    served.ctx.admin.create("t", 4)
    clients = Clients(bootstrap(served), "t", tmp_path, one_record_batches=True)
    try:
        clients.start()
        clients.round()
        fresh = len(clients.java.outcomes)
        TopicController(spark, root).alter("t", 6)  # the Java producers' murmur2 now takes an old count
        clients.round()
    finally:
        clients.close()
    acks = clients.acks()
    unknown = told(root, "t", acks)
    # Kafka's default partitioner with fresh metadata addresses where the server places: all exact
    assert not [a for a in clients.java.outcomes[:fresh] if a["value"].startswith("kafka|") and a["offset"] == -1]
    # keys the grow moved: placed under 6, answered unknown; the others' partitioners miss murmur2 under 4 and 6
    assert {"kafka", "last", "rdkafka", "sarama"} <= set(unknown)
    assert all(a["value"].split("|")[1] != "-" for a in unknown["sarama"] + unknown["rdkafka"])  # unkeyed stay
    assert len(unknown["sarama"]) > KEYS


def test_a_servers_placement_is_its_topics_default_and_a_topic_config_overrides_it(spark, root):
    from serve.server import Server
    from serve.settings import ServeSettings
    from tests.serve.raw import RawClient, batch, produce

    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5, placement="client")).run_in_thread()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap(server)})
        made = admin.create_topics([NewTopic("plain", 3, 1), NewTopic("keyed", 3, 1, config={"lakelog.placement": "key"})])
        for f in made.values():
            f.result(60)
        for name, shown in (("plain", ("client", ConfigSource.STATIC_BROKER_CONFIG.value)),
                            ("keyed", ("key", ConfigSource.DYNAMIC_TOPIC_CONFIG.value))):
            resource = ConfigResource("topic", name)
            entry = admin.describe_configs([resource])[resource].result(60)["lakelog.placement"]
            assert (entry.value, int(entry.source)) == shown
        client = RawClient(server.port)
        keys = [f"r{i}".encode() for i in range(12)]
        values = [b"v%d" % i for i in range(12)]
        assert produce(client, "plain", 1, batch(values, keys=keys)) == (0, 0)  # kept where addressed
        assert produce(client, "keyed", 1, batch(values, keys=keys)) == (0, -1)  # placed by key, unknown
        assert {r["partition"] for r in log_rows(root, "plain")} == {1}
        assert len({r["partition"] for r in log_rows(root, "keyed")}) > 1

        # a shrink 3 -> 2: a batch addressed to the marked partition has no place it was addressed to
        TopicController(spark, root, ControllerSettings(delete_partition_enable=True)).alter("plain", 2)
        assert produce(client, "plain", 2, batch([b"m0", b"m1"], keys=keys[:2])) == (0, -1)
        error, base = produce(client, "plain", 0, batch([b"z0", b"z1"], keys=keys[:2]))
        client.close()
        where = {r["value"]: (r["partition"], r["offset"]) for r in log_rows(root, "plain")}
        assert error == 0 and where[b"z0"] == (0, base) and where[b"z1"] == (0, base + 1)
        assert {where[b"m0"][0], where[b"m1"][0]} <= {0, 1}
    finally:
        stopped_with_no_task_left(server)


def test_lakelog_placement_is_set_described_and_checked_as_kafkas_topic_configs_are(spark, served, root):
    from click.testing import CliRunner

    from jobs.cli import cli
    from tests.serve.kafka_tools import kafka

    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("t", 2, 1)])["t"].result(60)
    resource = ConfigResource("topic", "t")

    def described():
        entry = admin.describe_configs([resource])[resource].result(60)["lakelog.placement"]
        return entry.value, int(entry.source), entry.is_default

    assert described() == ("key", ConfigSource.DEFAULT_CONFIG.value, True)  # the server's serve.placement
    kafka("configs", "--bootstrap-server", boot, "--alter", "--entity-type", "topics", "--entity-name", "t",
          "--add-config", "lakelog.placement=client")
    assert described() == ("client", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    bad = admin.incremental_alter_configs([ConfigResource("topic", "t", incremental_configs=[
        ConfigEntry("lakelog.placement", "murmur2", incremental_operation=AlterConfigOpType.SET)])])[resource]
    with pytest.raises(Exception, match="give key .* or client"):
        bad.result(60)
    assert described()[0] == "client"

    admin.incremental_alter_configs([ConfigResource("topic", "t", incremental_configs=[
        ConfigEntry("lakelog.placement", None, incremental_operation=AlterConfigOpType.DELETE)])])[resource].result(60)
    assert described()[0] == "key"
    out = CliRunner().invoke(cli, ["--root", root, "topics", "alter", "--topic", "t", "--config", "lakelog.placement=client"])
    assert out.exit_code == 0, out.output
    assert described()[0] == "client"
    out = CliRunner().invoke(cli, ["--root", root, "topics", "create", "--topic", "u", "--partitions", "1",
                                   "--config", "lakelog.placement=keys"])
    assert out.exit_code == 1 and "give key" in out.output
