"""A schedule's Kafka part (``chaos.schedule.KafkaPlan``): `lakelog serve` processes over the root,
killed with ``kill -9`` and started again on their port and node id; Kafka's idempotent producer
through them; the Kafka group's members, started, killed and restarted, frozen and thawed, as the
group members of ``chaos.members`` are. The producer is one of the runner's producers (its input
file, its acknowledgements, the checker's rules) and the group one of its groups (its sink, its
drain), each started here instead of as lakelog's."""

from __future__ import annotations

import signal
import socket

from chaos.processes import CRASH_EXIT
from chaos.schedule import KAFKA_ASSIGNORS, GroupPlan, KafkaPlan, MemberPlan, ProducerPlan

PLAIN, SASL = "PLAINTEXT", "SASL_PLAINTEXT"


def kafka_producer_plan(plan: KafkaPlan) -> ProducerPlan:
    """The Kafka producer as the runner's producers are listed (its input file and acknowledgements)."""
    return ProducerPlan(producer_id=plan.producer_id, records=plan.records, batch=1, start_at=plan.start_at)


def kafka_group_plan(plan: KafkaPlan) -> GroupPlan:
    """The Kafka group as the runner's groups are listed (its sink, its drain); ``protocol`` names the client."""
    return GroupPlan(name=plan.group, protocol=plan.client, assignor=plan.assignor, batch=plan.batch, members=plan.members)


def is_kafka_group(group: GroupPlan) -> bool:
    return group.protocol in KAFKA_ASSIGNORS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaSteps:
    """The runner's Kafka part (a part of ``chaos.runner.Runner``)."""

    def kafka_init(self) -> None:
        plan = self.s.kafka
        self.kafka_ports = [free_port() for _ in range(plan.servers)] if plan else []
        self.kafka_runs = [0] * len(self.kafka_ports)
        self.kafka_down: set[int] = set()  # servers killed and not yet started again

    def kafka_protocol(self, server: int) -> str:
        """One server: PLAINTEXT for both clients; two: the group's PLAINTEXT, the producer's SASL_PLAINTEXT."""
        return SASL if server == 1 else PLAIN

    def kafka_bootstrap(self, server: int) -> str:
        return f"127.0.0.1:{self.kafka_ports[server]}"

    def kafka_start(self, base: float) -> None:
        """At the schedule's start: the servers, and their kills."""
        for i in range(len(self.kafka_ports)):
            self.start_server(i)
        for kill in self.s.kafka.kills:
            self.at(base + kill.at, lambda k=kill: self.kill_server(k.server, k.down_for))

    def server_name(self, i: int) -> str:
        return f"serve{i}.{self.kafka_runs[i]}"

    def start_server(self, i: int) -> None:
        self.kafka_down.discard(i)
        self.kafka_runs[i] += 1
        name = self.server_name(i)

        def done(rc: int) -> None:
            if rc == -signal.SIGKILL or self.stopping:
                return
            self.unexpected(name, rc)
            self.at(self.now() + 1, lambda: self.start_server(i))

        self.spawn(name, "serve", {"port": self.kafka_ports[i], "node_id": i, "linger_ms": self.s.kafka.linger_ms,
                                   "protocol": self.kafka_protocol(i)}, done, module="chaos.kafka_actors")

    def kill_server(self, i: int, down_for: float) -> None:
        if i in self.kafka_down or not self.kill(self.server_name(i), "lakelog serve"):
            return
        self.kafka_down.add(i)
        self.result.faults["kill -9 lakelog serve"] += 1
        self.at(self.now() + down_for, lambda: self.start_server(i))

    def start_kafka_producer(self, plan: ProducerPlan) -> None:
        kafka = self.s.kafka
        server = kafka.servers - 1  # the producer's: the SASL one when there are two
        name = f"{plan.producer_id}.0"
        args = {"bootstrap": self.kafka_bootstrap(server), "protocol": self.kafka_protocol(server),
                "input": str(self.dir / "inputs" / f"{plan.producer_id}.jsonl"), "produce_for": kafka.produce_for,
                "ack_file": str(self.dir / "acks" / f"{plan.producer_id}.jsonl"), "topic": self.topic_of[plan.producer_id]}

        def done(rc: int) -> None:
            # never run again: a new Kafka producer is a new producer id, whose retries of what the
            # first sent would be new records (Kafka's idempotence lasts one producer session)
            self.pending_producers.discard(plan.producer_id)
            if rc == 0:
                self.log(f"{plan.producer_id} (Kafka producer) finished")
            else:
                self.unexpected(name, rc)

        self.spawn(name, "kafka_produce", args, done, module="chaos.kafka_actors")

    def start_kafka_member(self, group: GroupPlan, index: int, plan: MemberPlan) -> None:
        self.incarnation[(group.name, index)] += 1
        name = f"{group.name}-m{index}.{self.incarnation[(group.name, index)]}"
        args = {"bootstrap": self.kafka_bootstrap(0), "client": group.protocol, "assignor": group.assignor,
                "group": group.name, "member_id": name, "sink": self.sink_path(group),
                "stop_file": str(self.dir / "stop" / group.name), "topic": self.topic_of[group.name],
                "batch": group.batch, "lag_s": plan.lag_s if not self.stopping else 0.0,
                "session_ms": self.s.kafka.session_ms}

        def done(rc: int) -> None:
            self.members[group.name].remove(name)
            if rc == 0:
                return
            if rc != -signal.SIGKILL and rc != CRASH_EXIT:
                self.unexpected(name, rc)
            if not self.stopping:
                self.at(self.now() + plan.restart_after, lambda: self.start_member(group, index, plan))

        self.spawn(name, "kafka_member", args, done, module="chaos.kafka_actors")
        self.members[group.name].append(name)
