"""The processes of a schedule's Kafka part (``chaos.schedule.KafkaPlan``):
``python -m chaos.kafka_actors KIND JSON``. Each prints one JSON line per event, as
``chaos.actors`` does; an error ends it with exit code 1 and an ``error`` line. Kinds:

- ``serve``: a `lakelog serve` process over the root, attached to the campaign's JVM, on a fixed
  port and node id, so one started again after a ``kill -9`` is where its clients left it.
- ``kafka_produce``: an idempotent librdkafka producer (``acks=all``) sending the input file's
  records in order over ``produce_for`` seconds, appending each acknowledged record's sequence to
  ``ack_file``. Every record is addressed to partition 0, so they travel in one of the producer's
  sequence streams: a Kafka producer keeps order within a partition's stream across lost
  connections and retries, and the server places each keyed record by its key under the count it
  commits with (docs/serve.md, "Placement"); a key whose records the client spread over several
  streams keeps its order only while no request fails.
- ``kafka_member``: a classic consumer group member (kafka-python or librdkafka, the schedule's
  assignor) consuming into the group's Delta sink exactly once (``chaos.kafka_sink``) and committing,
  after each sink commit, the position of every partition it holds (the gates open on committed
  offsets only), until ``stop_file`` exists; ``lag_s`` sleeps after each batch.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

from chaos.kafka_sink import DeltaSink, Delivered

SASL_USER, SASL_PASSWORD = "chaos", "chaos-secret"  # the SASL_PLAINTEXT server's one user (PLAIN)


def say(event: str, **fields) -> None:
    print(json.dumps({**fields, "event": event, "at": round(time.time(), 3)}, default=str), flush=True)


_said: dict[str, float] = {}


def client_error(error: str, kind: str = "", **fields) -> None:
    """A client's error, once per kind every 5 s: a killed server's refused connections come
    every few milliseconds until it is back."""
    now = time.monotonic()
    if now - _said.get(kind or error, -1e9) >= 5:
        _said[kind or error] = now
        say("client_error", error=error, **fields)


def serve(a: dict) -> int:
    from chaos.host import session
    from serve.server import Server
    from serve.settings import ServeSettings

    logging.getLogger("lakelog.serve").setLevel(logging.INFO)
    sasl = a["protocol"] == "SASL_PLAINTEXT"
    settings = ServeSettings.model_validate({
        "listen": f"127.0.0.1:{a['port']}", "node_id": a["node_id"], "linger_ms": a["linger_ms"],
        "session_timeout_ms": a.get("session_timeout_ms", 6_000), "security_protocol": a["protocol"],
        **({"users": {SASL_USER: SASL_PASSWORD}, "sasl_mechanisms": ["PLAIN"]} if sasl else {})})
    Server(session(), a["root"], settings).run_forever(
        lambda s: say("listening", port=s.port, node_id=s.ctx.node_id, protocol=a["protocol"]))
    return 0


def kafka_produce(a: dict) -> int:
    from confluent_kafka import KafkaError, Producer

    records = [json.loads(line) for line in Path(a["input"]).read_text().splitlines() if line.strip()]
    fatal: list[str] = []
    failed: list[str] = []

    def on_error(err: KafkaError) -> None:
        client_error(str(err), err.name(), fatal=err.fatal())
        if err.fatal():
            fatal.append(str(err))

    producer = Producer({**_librdkafka_security(a), "bootstrap.servers": a["bootstrap"], "client.id": "chaos-producer",
                         "enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 180_000,
                         "error_cb": on_error})
    acks = open(a["ack_file"], "a")

    def delivered(seq: int):
        def done(err, msg) -> None:
            if err is not None:
                failed.append(f"#{seq}: {err}")
                return
            acks.write(json.dumps({"lo": seq, "hi": seq + 1, "partition": msg.partition(), "offset": msg.offset()}) + "\n")
            acks.flush()
        return done

    pace = a["produce_for"] / max(1, len(records))
    say("started", records=len(records))
    for seq, r in enumerate(records):
        while True:
            try:
                producer.produce(a["topic"], key=r["key"], value=r["value"], partition=0, on_delivery=delivered(seq))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if fatal:
            break
        time.sleep(pace)
    left = producer.flush(180)
    if fatal or failed or left:
        say("error", error="KafkaProducerError",
            message=f"fatal {fatal[:3]}, failed deliveries {len(failed)} {failed[:3]}, unflushed {left}")
        return 1
    say("produced", records=len(records))
    return 0


def _librdkafka_security(a: dict) -> dict:
    if a.get("protocol") != "SASL_PLAINTEXT":
        return {}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD}


class KafkaPythonMember:
    """A kafka-python consumer as the member loop drives it."""

    def __init__(self, a: dict) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}[a["assignor"]]
        self.topic = a["topic"]
        for attempt in range(60):  # the server may be down (killed, not yet started again): retry, as an application does
            try:
                self.consumer = KafkaConsumer(
                    bootstrap_servers=a["bootstrap"], group_id=a["group"], client_id=a["member_id"],
                    enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=a["session_ms"],
                    heartbeat_interval_ms=a["session_ms"] // 3, metadata_max_age_ms=1_000,
                    max_poll_records=a["batch"], partition_assignment_strategy=[assignor], fetch_max_wait_ms=500)
                break
            except Exception as exc:  # noqa: BLE001 - kafka-python's KafkaTimeoutError: unable to bootstrap
                if attempt == 59 or not _retriable(exc):
                    raise
                client_error(f"{type(exc).__name__}: {exc}", "bootstrap")
                time.sleep(1)
        self.consumer.subscribe([self.topic], listener=_kafka_python_listener())

    def poll(self) -> list[Delivered]:
        try:
            got = self.consumer.poll(timeout_ms=1_000)
        except Exception as exc:  # noqa: BLE001 - kafka-python raises a refused connection out of poll
            if not _retriable(exc):
                raise
            client_error(f"{type(exc).__name__}: {exc}", type(exc).__name__)
            time.sleep(0.5)
            return []
        return [Delivered(tp.partition, m.offset, m.key, m.value, m.timestamp, getattr(m, "leader_epoch", None))
                for tp, msgs in got.items() for m in msgs]

    def positions(self) -> dict[int, int]:
        out = {}
        for tp in self.consumer.assignment():
            try:
                position = self.consumer.position(tp, timeout_ms=2_000)
            except Exception:  # noqa: BLE001 - revoked meanwhile, or not known yet: next time
                continue
            if position is not None:
                out[tp.partition] = position
        return out

    def commit(self, positions: dict[int, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        self.consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()})

    def close(self) -> None:
        self.consumer.close(autocommit=False)


def _retriable(exc: Exception) -> bool:
    """A kafka-python error an application retries: the server is down or moving (a refused
    connection, no broker to bootstrap from, a timeout), not a fault in what was asked."""
    from kafka.errors import KafkaError

    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


def _kafka_python_listener():
    from kafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            say("assigned", partitions=sorted(tp.partition for tp in assigned))

        def on_partitions_revoked(self, revoked):
            say("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_lost(self, lost):
            say("lost", partitions=sorted(tp.partition for tp in lost))

    return Listener()


class LibrdkafkaMember:
    """A librdkafka (confluent-kafka) consumer as the member loop drives it."""

    def __init__(self, a: dict) -> None:
        from confluent_kafka import Consumer

        self.topic, self.batch = a["topic"], a["batch"]
        self.consumer = Consumer({
            "bootstrap.servers": a["bootstrap"], "group.id": a["group"], "client.id": a["member_id"],
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": a["session_ms"],
            "heartbeat.interval.ms": a["session_ms"] // 3, "topic.metadata.refresh.interval.ms": 1_000,
            "partition.assignment.strategy": a["assignor"], "fetch.wait.max.ms": 500,
            "error_cb": lambda err: client_error(str(err), err.name())})
        self.consumer.subscribe([self.topic], on_assign=lambda c, ps: say("assigned", partitions=[p.partition for p in ps]),
                                on_revoke=lambda c, ps: say("revoked", partitions=[p.partition for p in ps]),
                                on_lost=lambda c, ps: say("lost", partitions=[p.partition for p in ps]))

    def poll(self) -> list[Delivered]:
        out = []
        for m in self.consumer.consume(num_messages=self.batch, timeout=1.0):
            if m.error():
                client_error(str(m.error()), m.error().name())
                continue
            out.append(Delivered(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1], m.leader_epoch()))
        return out

    def positions(self) -> dict[int, int]:
        return {tp.partition: tp.offset for tp in self.consumer.position(self.consumer.assignment()) if tp.offset >= 0}

    def commit(self, positions: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()], asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


def kafka_member(a: dict) -> int:
    sink = DeltaSink(a["sink"], a["group"], a["topic"], a["member_id"])
    sink.ensure()
    client = (KafkaPythonMember if a["client"] == "kafka-python" else LibrdkafkaMember)(a)
    stop = Path(a["stop_file"])
    committed: dict[int, int] = {}
    delivered = 0
    say("started", member=a["member_id"], client=a["client"], assignor=a["assignor"])
    while not stop.exists():
        records = client.poll()
        if records:
            ranges = sink.write(records)
            delivered += sum(hi - lo for lo, hi in ranges.values())
            say("delivered", ranges=ranges, polled=len(records), total=delivered)
            if a.get("lag_s"):
                time.sleep(a["lag_s"])
        # every partition held, at its position or the sink's if ahead (a member killed between its
        # sink commit and its offset commit): what the group has delivered there
        positions = client.positions()
        want = {p: max(o, sink.held.get(p, -1)) for p, o in positions.items()}
        if any(committed.get(p) != o for p, o in want.items()):
            try:
                client.commit(want)
                committed.update(want)
                say("committed", positions=want)
            except Exception as exc:  # noqa: BLE001 - a rebalance fenced it: the next owner goes on from the sink
                say("commit_failed", error=f"{type(exc).__name__}: {exc}"[:300])
    client.close()
    say("left", total=delivered)
    return 0


ACTORS = {"serve": serve, "kafka_produce": kafka_produce, "kafka_member": kafka_member}


def main() -> int:
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("lakelog.gating").setLevel(logging.DEBUG)  # evidence for a failing schedule
    say("ready", kind=kind, pid=os.getpid(), tz=os.environ.get("TZ", ""))
    try:
        return ACTORS[kind](args)
    except Exception as exc:  # noqa: BLE001 - the runner counts it as an unexpected failure
        traceback.print_exc()
        say("error", error=type(exc).__name__, message=str(exc))
        return 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
