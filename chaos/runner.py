"""Runs one schedule against real Spark and real Delta tables, then checks it.

The runner itself runs no Spark: it starts actor processes (``chaos.actors``) at the schedule's
moments, kills them (SIGKILL), freezes them (SIGSTOP, a zombie) and restarts them, each under a
time zone of its own. When every producer has finished and every controller step is done, it
makes sure each group has a live member, waits until every group has consumed every live
partition to its log end (read with delta-rs, not lakelog), stops the members and runs the
independent checker (``chaos.checker``). Progress goes to ``progress`` (one line per event).
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from chaos import checker
from chaos.host import GATEWAY_ENV
from chaos.schedule import (
    MAX_PARTITIONS,
    REPLICA_STEPS,
    ControllerStep,
    GroupPlan,
    MemberPlan,
    ProducerPlan,
    Schedule,
    input_records,
    timezone_for,
)

PROJECT = Path(__file__).resolve().parents[1]
CRASH_EXIT = 86
DRAIN_TIMEOUT_S = 300.0  # the schedule's own work: three times this
DRAIN_STALL_S = 120.0  # a group that wrote nothing (positions, claims, generations) for this long is stuck (seed 44's deadlock)
DRAIN_LIMIT_S = 900.0  # a group still moving: slow on 2 cores under the campaign's load, not an anomaly
ACTOR_TIMEOUT_S = 240.0


@dataclass
class Actor:
    name: str
    kind: str
    proc: subprocess.Popen
    started: float
    on_exit: Callable[[int], None]
    frozen: bool = False


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


class Runner:
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
        # The decoy (schedule.DecoyPlan): one more producer and group, on a topic of their own.
        decoy = schedule.decoy
        self.producer_plans = list(schedule.producers) + (
            [ProducerPlan(producer_id="decoy", records=decoy.records, batch=20, start_at=1.0)] if decoy else [])
        self.group_plans = list(schedule.groups) + (
            [GroupPlan(name=decoy.group, protocol="eager", assignor="range", batch=50,
                       members=(MemberPlan(start_at=2.0),), sink=decoy.sink)] if decoy else [])
        self.topic_of = {p.producer_id: schedule.topic for p in schedule.producers} | {
            g.name: schedule.topic for g in schedule.groups} | ({"decoy": decoy.topic, decoy.group: decoy.topic} if decoy else {})
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

    # -- plumbing --------------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (self.t0 + when, next(self._seq), action))

    def log(self, line: str) -> None:
        self.progress(f"[seed {self.s.seed} {self.now():6.1f}s] {line}")

    def spawn(self, name: str, kind: str, args: dict, on_exit: Callable[[int], None], crash_at: str | None = None) -> Actor:
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "TZ": timezone_for(self.s, name), "PYTHONUNBUFFERED": "1"}
        env.pop("LAKELOG_CRASH_AT", None)
        if crash_at:
            env["LAKELOG_CRASH_AT"] = crash_at
        if self.gateway and not args.get("own_jvm"):
            env[GATEWAY_ENV] = self.gateway
        else:
            env.pop(GATEWAY_ENV, None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.actors", kind, json.dumps({"root": self.root, "topic": self.s.topic, **args})],
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
                else {"partitions": self.s.partitions, "replicas": self.replica_roots if self.s.replicas else None})
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

    def adapted(self, step: ControllerStep) -> tuple[ControllerStep, bool]:
        """``step`` resized from the count the topic has now (read with delta-rs): ``adapt_step``."""
        record = current_record(self.root, self.s.topic)
        if record is None:
            return step, False
        marked = [p["partition"] for p in record["partitions"] if p["mode"] == "ReadOnly"]
        return adapt_step(step, record["undeleted_partition_count"], marked)

    # -- replicas ------------------------------------------------------------------------------
    def log_link(self, index: int) -> Path:
        return Path(self.replica_roots[index]) / "topics" / self.s.topic

    def link_logs(self) -> None:
        """Move each root's log aside and reach it through a symlink (before anyone writes to it)."""
        for index in range(len(self.replica_roots)):
            link, real = self.log_link(index), self.dir / "real-logs" / str(index)
            real.parent.mkdir(parents=True, exist_ok=True)
            link.rename(real)
            link.symlink_to(real)

    def cut_root(self, index: int, seconds: float) -> None:
        """The root's log is lost for ``seconds`` (reads and writes fail), then returns."""
        if index in self.cut:
            return
        self.cut.add(index)
        self.cuts.append([self.now(), None])
        link = self.log_link(index)
        link.unlink()
        link.symlink_to(self.dir / "nowhere")
        self.result.faults["root lost"] += 1
        self.log(f"root {index} lost for {seconds:.1f}s")
        self.at(self.now() + seconds, lambda: self.restore_root(index))

    def restore_root(self, index: int) -> None:
        if index not in self.cut:
            return
        self.cut.discard(index)
        for span in self.cuts:
            if span[1] is None:
                span[1] = self.now()
                break
        link = self.log_link(index)
        link.unlink()
        link.symlink_to(self.dir / "real-logs" / str(index))
        self.log(f"root {index} back")

    def root_lost_since(self, started: float) -> bool:
        """Whether a root was lost at some moment since ``started`` (runner time): a step that failed
        meanwhile met the documented limit (the log cannot be changed while its root is lost) and
        is run again, as an operator would."""
        return any(end is None or end >= started for _lost, end in self.cuts)

    def leader_index(self) -> int:
        state = current_replica_state(self.root, self.s.topic)
        return self.replica_roots.index(state["leader"]) if state else 0

    def start_replica_step(self, i: int, step: ControllerStep, attempt: int) -> None:
        """A copy round, an election (the leader's root lost first, for some), or a follower lost."""
        if step.kind == "lag":
            leader = self.leader_index()
            followers = [k for k in range(len(self.replica_roots)) if k != leader]
            self.cut_root(followers[step.pick % len(followers)], step.cut_for)
            self.pending_steps -= 1
            return
        if step.kind == "elect" and step.cut_for and attempt == 0:
            self.cut_root(self.leader_index(), step.cut_for)
        name = f"ctl{i}.{attempt}.0"
        crash = step.crash_at if attempt == 0 else None

        def done(rc: int) -> None:
            event = self.last_event(name)
            if rc == CRASH_EXIT:
                self.result.faults[f"crash {crash}"] += 1
                self.at(self.now() + 0.5, lambda: self.start_replica_step(i, step, attempt + 1))
                return
            if rc == 0:
                self.result.operations[f"{step.kind} done"] += 1
            elif rc == 1 and (event.get("error") in (
                    "ReplicationError", "ConcurrentTopicChangeError", "FencedLeaderEpochError", "StorageError")
                    or self.root_lost_since(started)):
                # no in-sync root to elect, a racing election, or a root lost meanwhile
                self.result.operations[f"{step.kind} refused ({event.get('error') or 'a root lost'})"] += 1
            else:
                self.unexpected(name, rc)
            self.pending_steps -= 1

        started = self.now()
        if step.kind == "elect":
            self.log(f"ctl{i}: elect the next in-sync root")
        self.spawn(name, step.kind, {"leader": "next"} if step.kind == "elect" else {}, done, crash)

    def settle_replicas(self) -> None:
        """Every lost root back, then two copy rounds: the followers catch up before the checks."""
        for index in list(self.cut):
            self.restore_root(index)
        for n in range(2):
            finished: list[int] = []
            self.spawn(f"settle.{n}", "replicate", {}, finished.append)
            end = time.monotonic() + ACTOR_TIMEOUT_S
            while not finished and time.monotonic() < end:
                self.step()
                time.sleep(0.1)
            if finished and finished[0] != 0:
                self.unexpected(f"settle.{n}", finished[0])

    def start_step(self, i: int, step: ControllerStep, attempt: int, retired: bool = False) -> None:
        if step.kind in REPLICA_STEPS:
            self.start_replica_step(i, step, attempt)
            return
        if step.kind == "alter" and step.change:
            planned = step
            step, retire_first = self.adapted(step)
            if retire_first and not retired:  # as an operator would: retire the marked numbers, then grow
                self.result.operations["grow after a retirement"] += 1

                began = self.now()

                def then(rc: int) -> None:
                    lost_root = self.s.replicas and self.root_lost_since(began)
                    if rc not in (0, CRASH_EXIT) and not lost_root:  # a lost leader root: the grow is tried anyway
                        self.unexpected(f"ctl{i}.retire", rc)
                    self.start_step(i, planned, attempt, retired=True)
                self.spawn(f"ctl{i}.retire", "tick", {"delay": 0.0}, then)
                return
            if step.change:  # still blocked after the retirement: run the plan's target (refused)
                step = replace(step, change=None)
        racers = step.racers if attempt == 0 else 1
        left = {"n": racers}

        def done_for(name: str, crash: str | None) -> Callable[[int], None]:
            def done(rc: int) -> None:
                event = self.last_event(name)
                if rc == CRASH_EXIT:
                    self.result.faults[f"crash {crash}"] += 1
                    self.at(self.now() + 0.5, lambda: self.start_step(i, step, attempt + 1))  # re-running finishes it
                    return
                if rc == 0:
                    self.result.operations[f"{step.kind} done"] += 1
                elif rc == 1 and event.get("event") == "error" and event["error"] == "ConcurrentTopicChangeError" \
                        and racers == 1 and attempt < 3:
                    # lost the compare-and-set to an overlapping step: an operator re-runs it
                    self.result.operations[f"{step.kind} re-run after a lost race"] += 1
                    self.at(self.now() + 0.5, lambda: self.start_step(i, step, attempt + 1))
                    return
                elif rc == 1 and self.s.replicas and attempt < 10 and (
                        event.get("error") == "StorageError" or self.root_lost_since(started)):
                    # the leader's root is lost: the log cannot be changed until it returns or a
                    # root is elected; an operator runs the step again
                    self.result.operations[f"{step.kind} re-run after a lost root"] += 1
                    self.at(self.now() + 2, lambda: self.start_step(i, step, attempt + 1))
                    return
                elif rc == 1 and event.get("event") == "error" and (event["error"] in (
                        "InvalidPartitionsError", "ConcurrentTopicChangeError") or (
                        step.kind == "delete_records" and event["error"] == "InvalidConfigurationError")):
                    # a delete-records on a partition retired since the actor read it is refused
                    self.result.operations[f"{step.kind} refused ({event['error']})"] += 1
                else:
                    self.unexpected(name, rc)
                left["n"] -= 1
                if left["n"] == 0:
                    self.pending_steps -= 1
            return done

        if racers > 1:
            self.result.faults["racing controllers"] += 1
        started = self.now()
        for r in range(racers):
            name = f"ctl{i}.{attempt}.{r}"
            crash = step.crash_at if attempt == 0 and r == 0 else None
            args = ({"partitions": step.partitions} if step.kind == "alter" else
                    {"pick": step.pick, "fraction": step.fraction} if step.kind == "delete_records" else
                    {"bytes": step.bytes} if step.kind == "retention" else {"delay": step.delay})
            if step.kind == "alter" and r == 0 and attempt == 0:
                self.log(f"ctl{i}: alter to {step.partitions}")
            self.spawn(name, step.kind, args, done_for(name, crash), crash)

    def start_member(self, group: GroupPlan, index: int, plan: MemberPlan) -> None:
        if self.stopping:
            return
        self.incarnation[(group.name, index)] += 1
        n = self.incarnation[(group.name, index)]
        name = f"{group.name}-m{index}.{n}"
        crash = plan.crash_at if n == 1 else None
        args = {"group": group.name, "member_id": name, "protocol": group.protocol, "assignor": group.assignor,
                "sink": self.sink_path(group), "stop_file": str(self.dir / "stop" / group.name),
                "topic": self.topic_of[group.name],
                "batch": group.batch, "lag_s": plan.lag_s if not self.stopping else 0.0,
                "session_ms": self.s.session_ms, "heartbeat_ms": self.s.heartbeat_ms}

        def done(rc: int) -> None:
            self.members[group.name].remove(name)
            if rc == 0:
                return
            if rc == CRASH_EXIT:
                self.result.faults[f"crash {crash}"] += 1
            elif rc != -signal.SIGKILL:
                self.unexpected(name, rc)
            if not self.stopping:
                self.at(self.now() + plan.restart_after, lambda: self.start_member(group, index, plan))

        self.spawn(name, "member", args, done, crash)
        self.members[group.name].append(name)

    def member_faults(self, base: float, group: GroupPlan, index: int, plan: MemberPlan) -> None:
        def current() -> str:
            return f"{group.name}-m{index}.{self.incarnation[(group.name, index)]}"

        if plan.kill_at is not None:
            def kill() -> None:
                if self.kill(current(), "member"):
                    self.result.faults["kill -9 member"] += 1
            self.at(base + plan.kill_at, kill)
        if plan.freeze_at is not None:
            def freeze() -> None:
                actor = self.actors.get(current())
                if actor and actor.proc.poll() is None:
                    os.killpg(actor.proc.pid, signal.SIGSTOP)
                    actor.frozen = True
                    self.result.faults["zombie member (SIGSTOP)"] += 1
                    self.log(f"freeze {actor.name} for {plan.freeze_for}s")
                    self.at(self.now() + plan.freeze_for, lambda: self.thaw(actor))
            self.at(base + plan.freeze_at, freeze)

    def thaw(self, actor: Actor) -> None:
        if actor.frozen and actor.proc.poll() is None:
            os.killpg(actor.proc.pid, signal.SIGCONT)
            self.log(f"thaw {actor.name}")
        actor.frozen = False

    # -- the run ---------------------------------------------------------------------------------
    def schedule_work(self) -> None:
        """Once the topic exists: every producer, controller step and member at its moment."""
        base = self.now()
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
                if self.now() - actor.started > ACTOR_TIMEOUT_S and actor.kind != "member" and not actor.frozen:
                    self.result.problems.append(f"{name}: still running after {ACTOR_TIMEOUT_S:.0f}s")
                    self.kill(name, "timeout")
                continue
            del self.actors[name]
            actor.on_exit(rc)

    def busy(self) -> bool:
        return (not self.created or bool(self.pending_producers) or self.pending_steps > 0
                or self.now() < getattr(self, "work_ends", 0) or any(a.kind != "member" for a in self.actors.values()))

    def run(self) -> ScheduleResult:
        started = time.monotonic()
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
        finally:
            for name in list(self.actors):
                actor = self.actors[name]
                if actor.frozen:
                    self.thaw(actor)
                self.kill(name, "end of schedule")
            for actor in list(self.actors.values()):
                actor.proc.wait()
        self.check()
        self.result.seconds = time.monotonic() - started
        (self.dir / "result.json").write_text(json.dumps(self.result.to_dict(), indent=2))
        return self.result

    def drain(self) -> None:
        """Every group consumes every live partition to its log end, then its members leave."""
        for actor in list(self.actors.values()):
            self.thaw(actor)
        self.log("draining: every group consumes to the log end")
        started = time.monotonic()
        seen: dict[str, tuple[tuple, float]] = {}  # group -> ((its gap, its activity), when it last changed)
        behind: dict[str, str] = {}
        verdicts: dict[str, str] = {}
        while True:
            for group in self.group_plans:
                if not self.members[group.name]:
                    self.start_member(group, 0, MemberPlan(start_at=0))
            behind = {g.name: why for g in self.group_plans if (why := drain_gap(self.root, self.topic_of[g.name], g.name))}
            now = time.monotonic()
            for group, why in behind.items():
                # progress: positions moved, or the group rebalanced or claimed partitions (a slow
                # group is not a stuck one: seed 152's rejoined after two crashes under load)
                state = (why, group_activity(self.root, group))
                if seen.get(group, (None, 0.0))[0] != state:
                    seen[group] = (state, now)
            verdicts = {g: v for g in behind if (v := drain_stuck(started, seen[g][1], now))}
            if not behind or len(verdicts) == len(behind):
                break
            for _ in range(20):
                self.step()
                time.sleep(0.1)
        for group, why in behind.items():
            self.result.problems.append(f"group {group} did not drain ({verdicts[group]}): {why}")
        self.stopping = True
        for group in self.group_plans:
            (self.dir / "stop" / group.name).write_text("stop")
        end = time.monotonic() + 90
        while any(a.kind == "member" for a in self.actors.values()) and time.monotonic() < end:
            self.step()
            time.sleep(0.1)

    def check(self) -> None:
        acked: dict[str, set[int]] = {}
        for plan in self.producer_plans:
            path = self.dir / "acks" / f"{plan.producer_id}.jsonl"
            seqs: set[int] = set()
            if path.exists():
                for line in path.read_text().splitlines():
                    ack = json.loads(line)
                    seqs.update(range(ack["lo"], ack["hi"]))
            acked[plan.producer_id] = seqs
        found = None
        for topic in dict.fromkeys(self.topic_of.values()):  # the topic, then the decoy's
            inputs = {p.producer_id: str(self.dir / "inputs" / f"{p.producer_id}.jsonl") for p in self.producer_plans
                      if not p.bad_input and self.topic_of[p.producer_id] == topic}
            sinks = {g.name: self.sink_path(g) for g in self.group_plans if self.topic_of[g.name] == topic}
            one = checker.check(self.root, topic, inputs, {p: acked[p] for p in inputs}, sinks, found is None)
            if found is None:
                found = one
                continue
            for kind, n in one.counts.items():  # the decoy's findings, named by its topic
                found.counts[kind] += n
                found.samples[kind] += [f"[{topic}] {x}" for x in one.samples.get(kind, [])][:checker.SAMPLES]
            found.stats.update({f"{k}[{topic}]": v for k, v in one.stats.items()})
        if self.s.replicas:  # every root holds the leader's records at the same offsets
            leader = checker.log_location(self.root, self.s.topic)
            others = [str(self.log_link(k)) for k in range(len(self.replica_roots))]
            others = [p for p in others if os.path.realpath(p) != os.path.realpath(leader)]
            for what in checker.replica_divergence([leader, *others]):
                found.add("replica_divergence", what)
            found.stats["replica_roots"] = len(self.replica_roots)
        self.result.anomalies = {k: v for k, v in found.counts.items() if v}
        self.result.samples = {k: v for k, v in found.samples.items() if v}
        stray = [f"{err.stem}: {line.strip()[:300]}" for err in sorted((self.dir / "logs").glob("*.err"))
                 for line in err.read_text(errors="replace").splitlines() if "does not own" in line]
        if stray:  # the member's guard caught positions out of step with its ownership
            self.result.anomalies["positions_without_ownership"] = len(stray)
            self.result.samples["positions_without_ownership"] = stray[:5]
        if self.result.problems:
            self.result.anomalies["actor_failure_or_stuck"] = len(self.result.problems)
        self.result.stats = dict(found.stats)
        self.result.operations["records produced"] = found.stats.get("log_records", 0)
        for plan in self.s.producers:
            if plan.bad_input:
                self.result.operations["bad input producers"] += 1


def current_replica_state(root: str, topic: str) -> dict | None:
    """A replicated topic's latest replica state (read with delta-rs; None if it has none)."""
    path = f"{root}/control/topic_replicas"
    if not os.path.isdir(f"{path}/_delta_log"):
        return None
    rows = [r for r in checker.read_current(path) if r["topic"] == topic]
    return max(rows, key=lambda r: (r["incarnation"], r["replica_version"])) if rows else None


def drain_stuck(started: float, moved: float, now: float) -> str | None:
    """Why draining a group stops short (None: let it go on), on the runner's monotonic clock:
    it wrote nothing for DRAIN_STALL_S (``group_activity``), or it is still moving after DRAIN_LIMIT_S."""
    if now - moved >= DRAIN_STALL_S:
        return f"no progress for {DRAIN_STALL_S:.0f}s"
    if now - started >= DRAIN_LIMIT_S:
        return f"still behind after {DRAIN_LIMIT_S:.0f}s"
    return None


def group_activity(root: str, group: str) -> int:
    """How many rows ``group`` has written to ``offset_commits`` (positions, claims, generations, expiry
    reports): while it grows, the group is working, however slowly. Read with delta-rs."""
    return sum(1 for c in checker.read_changes(f"{root}/control/offset_commits") if c["group"] == group)


def adapt_step(step: ControllerStep, count: int, marked: list[int]) -> tuple[ControllerStep, bool]:
    """A grow or shrink by ``step.by`` from ``count`` undeleted partitions (``marked``: the numbers
    marked for deletion), so a step that the plan's guess of the count would make invalid still
    resizes: a shrink at 1 grows, a grow at the maximum shrinks, a grow stops below a marked number.
    True when marked partitions hold the very next number a grow needs: retire them first."""
    change = step.change
    if change == "shrink" and count <= 1 or change == "grow" and count >= MAX_PARTITIONS:
        change = "grow" if change == "shrink" else "shrink"
    if change == "shrink":
        return replace(step, partitions=max(1, count - step.by), change=None), False
    target = min(MAX_PARTITIONS, count + max(step.by, 1))
    blocked = [q for q in marked if count <= q < target]
    if blocked and min(blocked) == count:
        return step, True
    return replace(step, partitions=min([target, *blocked]), change=None), False


def current_record(root: str, topic: str) -> dict | None:
    """The topic's latest control record (its partitions, modes, undeleted count). Read with delta-rs."""
    history = [r for r in checker.read_current(f"{root}/control/topics") if r["topic"] == topic]
    return max(history, key=lambda r: r["topic_version"]) if history else None


def drain_gap(root: str, topic: str, group: str) -> str | None:
    """Why ``group`` has not consumed every live partition to its log end (None: it has). Read with delta-rs.

    A group stands where it last committed, moved up by what it reported expired; on a live
    partition it never committed, at the start of the partition's current incarnation (a number
    grown back over a retired one starts at the old end: campaign seed 152), or at its log start."""
    latest = current_record(root, topic)
    if latest is None:
        return "no topic"
    starts = {p["partition"]: p.get("start_offset") or 0 for p in latest["partitions"] if p["mode"] != "None"}
    raised = checker.log_starts(checker.log_location(root, topic), starts)  # retention, delete-records
    starts = {p: max(o, raised.get(p, 0)) for p, o in starts.items()}
    ends: dict[int, int] = defaultdict(int)
    for r in checker.read_log_changes(checker.log_location(root, topic)):
        ends[r["partition"]] = max(ends[r["partition"]], r["offset"] + 1)
    positions: dict[int, int] = {}
    commits = [c for c in checker.read_changes(f"{root}/control/offset_commits")
               if c["group"] == group and c["topic"] == topic and c["offset"] >= 0
               and c["kind"] in ("commit", "revoke", "reset", "expired")]
    for c in sorted(commits, key=lambda c: c["_commit_version"]):
        if c["kind"] == "expired":
            positions[c["partition"]] = max(positions.get(c["partition"], 0), c["end_offset"])
        else:
            positions[c["partition"]] = c["offset"]
    gaps = {p: (positions.get(p, start), ends.get(p, 0)) for p, start in sorted(starts.items())
            if positions.get(p, start) < ends.get(p, 0)}
    return ", ".join(f"p{p} at {pos} of {end}" for p, (pos, end) in gaps.items()) or None
