"""Runs one schedule against real Spark and real Delta tables, then checks it.

The runner itself runs no Spark: it starts actor processes (``chaos.actors``) at the schedule's
moments, kills them (SIGKILL), freezes them (SIGSTOP, a zombie) and restarts them, each under a
time zone of its own. When every producer has finished and every controller step is done, it
makes sure each group has a live member, waits until every group has consumed every live
partition to its log end (read with delta-rs, not lakelog), stops the members and runs the
independent checker (``chaos.checker``). Progress goes to ``progress`` (one line per event).

Its parts, one module each: the controller's steps (``chaos.controller_steps``), a replicated
schedule's steps and lost roots (``chaos.replica_steps``), group members (``chaos.members``), Kafka's
clients and the `lakelog serve` processes they go through (``chaos.kafka_steps``), the stream
reader and its Spark Connect server (``chaos.stream_steps``), the drain
(``chaos.drain``), the verdict (``chaos.verdict``) and what it reads from the tables
(``chaos.tables``). This module holds the plumbing (start, kill, follow actors), the topic's
creation, the producers and the event loop.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from chaos.controller_steps import ControllerSteps
from chaos.drain import DRAIN_TIMEOUT_S, Draining
from chaos.host import GATEWAY_ENV
from chaos.kafka_steps import KafkaSteps, kafka_group_plan, kafka_producer_plan
from chaos.members import GroupMembers
from chaos.processes import ACTOR_TIMEOUT_S, CRASH_EXIT, LONG_RUNNING, PROJECT, Actor
from chaos.replica_steps import ReplicaSteps
from chaos.schedule import GroupPlan, MemberPlan, ProducerPlan, Schedule, input_records, timezone_for
from chaos.stream_steps import StreamSteps
from chaos.txn_steps import TxnSteps
from chaos.verdict import Verdict
from log_store.crash import CRASH_ENV, PAUSE_DIR_ENV, PAUSE_ENV

__all__ = ["PROJECT", "Runner", "ScheduleResult"]


@dataclass
class ScheduleResult:
    seed: int
    seconds: float = 0.0
    operations: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    anomalies: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # actor failures, stuck groups: counted as anomalies
    workdir: str = ""

    @property
    def anomaly_count(self) -> int:
        return sum(self.anomalies.values())

    def to_dict(self) -> dict:
        return {"seed": self.seed, "seconds": round(self.seconds, 1), "operations": dict(self.operations),
                "faults": dict(self.faults), "anomalies": self.anomalies, "samples": self.samples,
                "stats": self.stats, "problems": self.problems, "workdir": self.workdir}

    @classmethod
    def from_dict(cls, d: dict) -> "ScheduleResult":
        """As ``to_dict`` wrote it (a resumed campaign's earlier schedules)."""
        return cls(**{**d, "operations": Counter(d.get("operations", {})), "faults": Counter(d.get("faults", {}))})


class Runner(ReplicaSteps, ControllerSteps, GroupMembers, KafkaSteps, StreamSteps, TxnSteps, Draining, Verdict):
    """Executes one schedule in ``workdir`` with actors attached to the host JVM at ``gateway``."""

    def __init__(self, schedule: Schedule, workdir: Path, gateway: str | None,
                 progress: Callable[[str], None] = lambda line: None, env: dict | None = None) -> None:
        self.s = schedule
        self.dir = workdir
        self.root = str(workdir / "root")
        self.gateway = gateway
        self.progress = progress
        self.env = env or {}
        self.result = ScheduleResult(seed=schedule.seed, workdir=str(workdir))
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.actors: dict[str, Actor] = {}
        self.t0 = 0.0
        # The decoy (schedule.DecoyPlan): one more producer and group, on a topic of their own. The
        # Kafka part (schedule.KafkaPlan, chaos.kafka_steps): one more producer and group on the topic.
        decoy, kafka = schedule.decoy, schedule.kafka
        self.kafka_producers = {kafka.producer_id} if kafka else set()
        main_producers = list(schedule.producers) + ([kafka_producer_plan(kafka)] if kafka else []) + (
            [schedule.stream_writer] if schedule.stream_writer else [])
        main_groups = list(schedule.groups) + ([kafka_group_plan(kafka)] if kafka else [])
        self.producer_plans = main_producers + (
            [ProducerPlan(producer_id="decoy", records=decoy.records, batch=20, start_at=1.0)] if decoy else [])
        self.group_plans = main_groups + (
            [GroupPlan(name=decoy.group, protocol="eager", assignor="range", batch=50,
                       members=(MemberPlan(start_at=2.0),), sink=decoy.sink)] if decoy else [])
        self.topic_of = {p.producer_id: schedule.topic for p in main_producers} | {
            g.name: schedule.topic for g in main_groups} | ({"decoy": decoy.topic, decoy.group: decoy.topic} if decoy else {})
        self.pending_producers = {p.producer_id for p in self.producer_plans}
        self.pending_steps = 0
        self.created = False
        self.members: dict[str, list[str]] = defaultdict(list)  # group -> live member actor names
        self.incarnation = Counter()
        self.stopping = False
        self.rng = random.Random(f"{schedule.seed}/runner")
        # A replicated schedule: the topic's root leads first, the follower roots beside it. Each
        # root's log is reached through a symlink the runner can point nowhere (a root lost).
        self.replica_roots = [self.root] + [str(workdir / name) for name in schedule.replicas]
        self.cut: set[int] = set()
        self.cuts: list[list[float | None]] = []  # [lost at, back at] of every root lost, runner time
        self.kafka_init()
        self.stream_init()
        self.txn_init()

    # -- plumbing --------------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (self.t0 + when, next(self._seq), action))

    def log(self, line: str) -> None:
        self.progress(f"[seed {self.s.seed} {self.now():6.1f}s] {line}")

    def spawn(self, name: str, kind: str, args: dict, on_exit: Callable[[int], None], crash_at: str | None = None,
              pause: dict[str, str] | None = None, module: str = "chaos.actors") -> Actor:
        """Start actor ``name``; ``crash_at``: its crash point; ``pause``: its pause point's environment;
        ``module``: where its kind is (``chaos.actors``, ``chaos.kafka_actors``)."""
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # PYTHONFAULTHANDLER: an actor killed by a signal of its own (a crash in native code, at exit
        # too) leaves its threads' stacks in its .err log
        env = {**os.environ, **self.env, "TZ": timezone_for(self.s, name), "PYTHONUNBUFFERED": "1",
               "PYTHONFAULTHANDLER": "1"}
        for variable in (CRASH_ENV, PAUSE_ENV, PAUSE_DIR_ENV):
            env.pop(variable, None)
        if crash_at:
            env[CRASH_ENV] = crash_at
        env.update(pause or {})
        if self.gateway and not args.get("own_jvm"):
            env[GATEWAY_ENV] = self.gateway
        else:
            env.pop(GATEWAY_ENV, None)
        proc = subprocess.Popen(
            [sys.executable, "-m", module, kind, json.dumps({"root": self.root, "topic": self.s.topic, **args})],
            cwd=PROJECT, env=env, stdout=open(logs / f"{name}.out", "a"), stderr=open(logs / f"{name}.err", "a"),
            start_new_session=True,
        )
        actor = Actor(name=name, kind=kind, proc=proc, started=self.now(), on_exit=on_exit)
        self.actors[name] = actor
        self.result.operations[f"{kind} runs"] += 1
        self.log(f"start {name} ({kind}{', crash at ' + crash_at if crash_at else ''}{', own JVM' if args.get('own_jvm') else ''}, TZ={env['TZ']})")
        return actor

    def last_event(self, name: str) -> dict:
        path = self.dir / "logs" / f"{name}.out"
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("{")] if path.exists() else []
        return json.loads(lines[-1]) if lines else {}

    def stderr_tail(self, name: str, n: int = 1500) -> str:
        path = self.dir / "logs" / f"{name}.err"
        return path.read_text()[-n:] if path.exists() else ""

    def kill(self, name: str, why: str) -> bool:
        actor = self.actors.get(name)
        if actor is None or actor.proc.poll() is not None:
            return False
        os.killpg(actor.proc.pid, signal.SIGKILL)
        self.log(f"kill -9 {name} ({why})")
        return True

    def unexpected(self, name: str, rc: int) -> None:
        event = self.last_event(name)
        what = f"{event.get('error')}: {event.get('message', '')[:300]}" if event.get("event") == "error" else \
            f"exit {rc}: {self.stderr_tail(name, 600)}"
        self.result.problems.append(f"{name}: {what}")
        self.result.faults["unexpected actor failures"] += 1
        self.log(f"{name} failed unexpectedly ({what[:200]})")

    # -- actors ----------------------------------------------------------------------------------
    def start_create(self, crash: bool, decoy: bool = False) -> None:
        """Create the topic (then the decoy's), then start the schedule's work."""
        name = "create-decoy" if decoy else "create"

        def done(rc: int) -> None:
            if rc == 0:
                if not decoy and self.s.decoy:
                    self.start_create(False, decoy=True)
                    return
                self.created = True
                if self.s.replicas:
                    self.link_logs()
                self.schedule_work()
            elif rc == CRASH_EXIT:
                self.result.faults["crash create:after_log_table"] += 1
                self.start_create(False, decoy)
            else:
                self.unexpected(name, rc)
                self.at(self.now() + 1, lambda: self.start_create(False, decoy))

        args = ({"partitions": self.s.decoy.partitions, "topic": self.s.decoy.topic} if decoy
                else {"partitions": self.s.partitions, "replicas": self.replica_roots if self.s.replicas else None,
                      "configs": self.s.compaction.configs() if self.s.compaction else None})
        self.spawn(name, "create", args, done, crash_at="create:after_log_table" if crash else None)

    def write_inputs(self) -> None:
        (self.dir / "inputs").mkdir(parents=True, exist_ok=True)
        (self.dir / "acks").mkdir(parents=True, exist_ok=True)
        for plan in self.producer_plans:
            records = input_records(self.s, plan)
            lines = [json.dumps(r) for r in records]
            if plan.bad_input:
                lines[len(lines) // 2] = '{"key": "k1", "value": '  # malformed: nothing may be written
            (self.dir / "inputs" / f"{plan.producer_id}.jsonl").write_text("\n".join(lines) + "\n")

    def start_producer(self, plan: ProducerPlan, run: int) -> None:
        if plan.producer_id in self.kafka_producers:
            self.start_kafka_producer(plan)
            return
        if plan is self.s.stream_writer:
            self.start_stream_writer(plan, run)
            return
        name = f"{plan.producer_id}.{run}"
        crash = plan.crash_at if run == 0 else None
        args = {"producer_id": plan.producer_id, "input": str(self.dir / "inputs" / f"{plan.producer_id}.jsonl"),
                "records": plan.records, "batch": plan.batch, "ack_file": str(self.dir / "acks" / f"{plan.producer_id}.jsonl"),
                "own_jvm": plan.own_jvm and run == 0, "topic": self.topic_of[plan.producer_id],
                # a replicated topic's producers wait for the in-sync set: a lost leader loses none of their acks
                "acks": "all" if self.s.replicas and self.topic_of[plan.producer_id] == self.s.topic else "1"}

        def done(rc: int) -> None:
            if rc == 0 and not plan.bad_input:
                self.pending_producers.discard(plan.producer_id)
                self.log(f"{plan.producer_id} finished after {run + 1} runs")
                return
            if plan.bad_input and rc == 1 and self.last_event(name).get("error") == "InvalidRecordError":
                self.pending_producers.discard(plan.producer_id)
                self.result.operations["bad inputs refused"] += 1
                return
            if rc == CRASH_EXIT:
                self.result.faults[f"crash {crash.split('@')[0]}"] += 1
            elif rc != -signal.SIGKILL:
                self.unexpected(name, rc)
            self.at(self.now() + self.rng.uniform(0.5, 2), lambda: self.start_producer(plan, run + 1))

        actor = self.spawn(name, "produce", args, done, crash)
        if run < len(plan.kill_after):
            def kill() -> None:
                if self.kill(name, "producer"):
                    self.result.faults["kill -9 producer"] += 1
            self.at(actor.started + plan.kill_after[run], kill)

    def sink_path(self, group: GroupPlan) -> str:
        return f"{self.root}/sinks/{group.sink_name}"

    # -- the run ---------------------------------------------------------------------------------
    def schedule_work(self) -> None:
        """Once the topic exists: every producer, controller step and member at its moment."""
        base = self.now()
        if self.s.kafka:
            self.kafka_start(base)
        self.stream_start(base)
        self.txn_start(base)
        for plan in self.producer_plans:
            self.at(base + plan.start_at, lambda plan=plan: self.start_producer(plan, 0))
        self.pending_steps = len(self.s.controller)
        for i, step in enumerate(self.s.controller):
            self.at(base + step.at, lambda i=i, step=step: self.start_step(i, step, 0))
        for group in self.group_plans:
            for index, plan in enumerate(group.members):
                self.at(base + plan.start_at, lambda g=group, i=index, p=plan: self.start_member(g, i, p))
                self.member_faults(base, group, index, plan)
        self.work_ends = base + self.s.last_event

    def step(self) -> None:
        while self.events and self.events[0][0] <= time.monotonic():
            _, _, action = heapq.heappop(self.events)
            action()
        for name, actor in list(self.actors.items()):
            rc = actor.proc.poll()
            if rc is None:
                if self.now() - actor.started > ACTOR_TIMEOUT_S and actor.kind not in LONG_RUNNING and not actor.frozen:
                    self.result.problems.append(f"{name}: still running after {ACTOR_TIMEOUT_S:.0f}s")
                    self.kill(name, "timeout")
                continue
            del self.actors[name]
            actor.on_exit(rc)

    def busy(self) -> bool:
        return (not self.created or bool(self.pending_producers) or self.pending_steps > 0
                or self.now() < getattr(self, "work_ends", 0) or any(a.kind not in LONG_RUNNING for a in self.actors.values()))

    def run(self) -> ScheduleResult:
        started = time.monotonic()
        self.stream_prepare()
        self.t0 = time.monotonic()
        (self.dir / "stop").mkdir(parents=True, exist_ok=True)
        self.write_inputs()
        self.start_create(self.s.create_crash)
        try:
            deadline = self.t0 + DRAIN_TIMEOUT_S * 3
            while self.busy() and time.monotonic() < deadline:
                self.step()
                time.sleep(0.1)
            if self.busy():
                self.result.problems.append("the schedule's work did not finish in time")
            if self.s.replicas:
                self.settle_replicas()
            self.drain()
            self.txn_settle()
        finally:
            for name in list(self.actors):
                actor = self.actors[name]
                if actor.frozen:
                    self.thaw(actor)
                self.kill(name, "end of schedule")
            for actor in list(self.actors.values()):
                actor.proc.wait()
            self.stream_stop()
        self.check()
        self.result.seconds = time.monotonic() - started
        (self.dir / "result.json").write_text(json.dumps(self.result.to_dict(), indent=2))
        return self.result

