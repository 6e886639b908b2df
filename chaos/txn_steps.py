"""A schedule's transactions (``schedule.TxnPlan``): the copy topics' creation, the read-process-write
copiers (``actors.txn_copy``) with their faults (SIGKILL mid-transaction, a crash point, a zombie
frozen while a successor under its id starts), the coordinator's ticks and `transactions abort`s
racing them, a read_committed group reading a copy topic, and a last tick once everyone stopped."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

from chaos.plans import CopierPlan, TxnPlan
from chaos.processes import CRASH_EXIT

FENCED = "ProducerFencedError"


class TxnSteps:
    """The runner's transactions (a part of ``chaos.runner.Runner``)."""

    def txn_init(self) -> None:
        self.copier_runs: Counter = Counter()
        self.copier_live: dict[int, str | None] = {}  # slot -> its current (not superseded) run
        self.copier_pending: set[int] = set()  # slots with a restart scheduled
        self.txn_zombies: set[str] = set()
        self.txn_reader_live: str | None = None
        self.txn_ready = False

    @property
    def txn(self) -> TxnPlan | None:
        return self.s.transactions

    def txn_start(self, base: float) -> None:
        """Create the copy topics (at once, racing each other), then start the copiers, the reader
        and the races, their moments counted from when the copy topics exist."""
        if not self.txn:
            return
        waiting = set(self.txn.topics)
        for topic in self.txn.topics:
            def done(rc: int, topic: str = topic) -> None:
                if rc != 0:
                    self.unexpected(f"create-{topic}", rc)
                    self.at(self.now() + 1, lambda: self.spawn(f"create-{topic}", "create", {
                        "topic": topic, "partitions": self.txn.partitions}, done))
                    return
                waiting.discard(topic)
                if not waiting:
                    self.txn_ready = True
                    self.txn_schedule(self.now())
            self.spawn(f"create-{topic}", "create", {"topic": topic, "partitions": self.txn.partitions}, done)

    def txn_schedule(self, base: float) -> None:
        t = self.txn
        for i, plan in enumerate(t.copiers):
            self.at(base + plan.start_at, lambda i=i, plan=plan: self.start_copier(i, plan))
            if plan.kill_at is not None:
                self.at(base + plan.kill_at, lambda i=i: self.kill_copier(i))
            if plan.freeze_at is not None:
                self.at(base + plan.freeze_at, lambda i=i, plan=plan: self.zombie(i, plan))
        for when in t.ticks:
            self.at(base + when, lambda: self.txn_race("txn_tick", {}))
        for when, k in t.aborts:
            self.at(base + when, lambda k=k: self.txn_race("txn_abort", {"transactional_id": t.copiers[k].transactional_id}))
        if t.reader:
            self.at(base + t.reader.start_at, self.start_txn_reader)
            if t.reader.kill_at is not None:
                self.at(base + t.reader.kill_at, self.kill_txn_reader)
        # the schedule's work lasts until its transactions' last moment too
        self.work_ends = max(getattr(self, "work_ends", 0.0), base + self.s.last_event)

    def start_copier(self, i: int, plan: CopierPlan) -> None:
        self.copier_pending.discard(i)
        if self.stopping or self.copier_live.get(i):
            return
        self.copier_runs[i] += 1
        n = self.copier_runs[i]
        name = f"{plan.transactional_id}.{n}"
        crash = plan.crash_at if n == 1 else None
        args = {"transactional_id": plan.transactional_id, "group": plan.group, "outputs": list(plan.outputs),
                "batch": plan.batch, "abort_every": plan.abort_every, "stop_file": str(self.dir / "stop" / plan.group)}

        def done(rc: int) -> None:
            fenced = rc == 1 and self.last_event(name).get("error") == FENCED
            if name in self.txn_zombies:  # superseded by a successor under its id
                if fenced:
                    self.result.faults["zombie copier fenced"] += 1
                elif rc == 0:
                    self.result.operations["zombie copier ended without writing again"] += 1
                elif rc == CRASH_EXIT and crash:  # thawed, it went on to its own crash point
                    self.result.faults[f"crash {crash.split('@')[0]}"] += 1
                else:
                    self.unexpected(name, rc)
                return
            if self.copier_live.get(i) == name:
                self.copier_live[i] = None
            if rc == 0:
                return
            if rc == CRASH_EXIT:
                self.result.faults[f"crash {crash.split('@')[0]}"] += 1
            elif fenced:  # a `transactions abort` fenced it: its successor goes on
                self.result.operations["copier fenced by an abort"] += 1
            elif rc != -signal.SIGKILL:
                self.unexpected(name, rc)
            self.restart_copier(i, plan)

        self.spawn(name, "txn_copy", args, done, crash)
        self.copier_live[i] = name

    def restart_copier(self, i: int, plan: CopierPlan, after: float | None = None) -> None:
        if not self.stopping and i not in self.copier_pending:
            self.copier_pending.add(i)
            self.at(self.now() + (plan.restart_after if after is None else after), lambda: self.start_copier(i, plan))

    def kill_copier(self, i: int) -> None:
        name = self.copier_live.get(i)
        if name and self.kill(name, "copier, mid-transaction"):
            self.result.faults["kill -9 copier"] += 1

    def zombie(self, i: int, plan: CopierPlan) -> None:
        """Freeze the copier's run, start a successor under its id, thaw the first later: fenced."""
        name = self.copier_live.get(i)
        actor = self.actors.get(name) if name else None
        if actor is None or actor.proc.poll() is not None or self.stopping:
            return
        os.killpg(actor.proc.pid, signal.SIGSTOP)
        actor.frozen = True
        self.txn_zombies.add(name)
        self.copier_live[i] = None
        self.result.faults["zombie copier (SIGSTOP, successor started)"] += 1
        self.log(f"freeze {name} for {plan.freeze_for}s; a successor takes its transactional id")
        self.start_copier(i, plan)
        self.at(self.now() + plan.freeze_for, lambda: self.thaw(actor))

    def txn_race(self, kind: str, args: dict, last: bool = False) -> None:
        if self.stopping and not last:
            return
        name = f"{kind}.{self.result.operations[f'{kind} runs']}"

        def done(rc: int) -> None:
            if rc != 0:
                self.unexpected(name, rc)
        self.spawn(name, kind, args, done)

    def start_txn_reader(self) -> None:
        t = self.txn
        if self.stopping or self.txn_reader_live:
            return
        self.incarnation[t.group] += 1
        name = f"{t.group}-m0.{self.incarnation[t.group]}"
        args = {"group": t.group, "member_id": name, "protocol": "eager", "assignor": "range",
                "sink": f"{self.root}/sinks/{t.sink}", "stop_file": str(self.dir / "stop" / t.group),
                "topic": t.copiers[0].outputs[0], "batch": 50, "lag_s": 0.0, "isolation_level": "read_committed",
                "session_ms": self.s.session_ms, "heartbeat_ms": self.s.heartbeat_ms}

        def done(rc: int) -> None:
            self.txn_reader_live = None
            if rc not in (0, -signal.SIGKILL):
                self.unexpected(name, rc)
            if rc != 0 and not self.stopping:
                self.at(self.now() + (t.reader.restart_after if t.reader else 2.0), self.start_txn_reader)
        self.spawn(name, "member", args, done)
        self.txn_reader_live = name

    def kill_txn_reader(self) -> None:
        if self.txn_reader_live and self.kill(self.txn_reader_live, "read_committed member"):
            self.result.faults["kill -9 read_committed member"] += 1

    def txn_groups(self) -> dict[str, str]:
        """What the drain waits for (group -> the topic it reads): each copier's group on the topic,
        the read_committed group on its copy topic; while draining, every slot has a live run."""
        if not self.txn or not self.txn_ready:
            return {}
        if not self.stopping:
            for i, plan in enumerate(self.txn.copiers):
                if not self.copier_live.get(i):
                    self.restart_copier(i, plan, after=0.0)
            self.start_txn_reader()
        return {c.group: self.s.topic for c in self.txn.copiers} | {self.txn.group: self.txn.copiers[0].outputs[0]}

    def txn_settle(self) -> None:
        """Once every copier stopped: one coordinator tick (what `controller tick` finishes), waited for."""
        if not self.txn:
            return
        self.txn_race("txn_tick", {}, last=True)
        end = time.monotonic() + 120
        while any(a.kind == "txn_tick" for a in self.actors.values()) and time.monotonic() < end:
            self.step()
            time.sleep(0.1)
