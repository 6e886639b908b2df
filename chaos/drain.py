"""The end of a schedule: every group (and the stream, by its group's positions) consumes every
live partition to its log end, then its members (and the stream) leave. A group that stops
moving (``drain_stuck``) is reported, not waited for forever."""

from __future__ import annotations

import time

from chaos.processes import MEMBER_KINDS
from chaos.schedule import MemberPlan
from chaos.tables import drain_gap, group_activity

DRAIN_TIMEOUT_S = 300.0  # the schedule's own work: three times this
DRAIN_STALL_S = 120.0  # a group that wrote nothing (positions, claims, generations) for this long is stuck (seed 44's deadlock)
DRAIN_LIMIT_S = 900.0  # a group still moving: slow on 2 cores under the campaign's load, not an anomaly


class Draining:
    """The runner's drain (a part of ``chaos.runner.Runner``)."""

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
            groups = {g.name: self.topic_of[g.name] for g in self.group_plans} | self.stream_groups() | self.txn_groups()
            behind = {g: why for g, topic in groups.items() if (why := drain_gap(self.root, topic, g))}
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
        for group in [g.name for g in self.group_plans] + list(self.stream_groups()) + list(self.txn_groups()):
            (self.dir / "stop" / group).write_text("stop")
        end = time.monotonic() + 90
        while any(a.kind in MEMBER_KINDS for a in self.actors.values()) and time.monotonic() < end:
            self.step()
            time.sleep(0.1)


def drain_stuck(started: float, moved: float, now: float) -> str | None:
    """Why draining a group stops short (None: let it go on), on the runner's monotonic clock:
    it wrote nothing for DRAIN_STALL_S (``group_activity``), or it is still moving after DRAIN_LIMIT_S."""
    if now - moved >= DRAIN_STALL_S:
        return f"no progress for {DRAIN_STALL_S:.0f}s"
    if now - started >= DRAIN_LIMIT_S:
        return f"still behind after {DRAIN_LIMIT_S:.0f}s"
    return None


