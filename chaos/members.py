"""A schedule's group members: started, killed (SIGKILL) and restarted, frozen (SIGSTOP, a zombie
expelled meanwhile) and thawed."""

from __future__ import annotations

import os
import signal

from chaos.kafka_steps import is_kafka_group
from chaos.processes import CRASH_EXIT, Actor
from chaos.schedule import GroupPlan, MemberPlan


class GroupMembers:
    """The runner's group members (a part of ``chaos.runner.Runner``)."""

    def start_member(self, group: GroupPlan, index: int, plan: MemberPlan) -> None:
        if self.stopping:
            return
        if is_kafka_group(group):
            self.start_kafka_member(group, index, plan)
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

