"""A replicated schedule's steps: copy rounds, elections (some after the leader's root is lost),
a follower cut off for a while, and the two rounds that let every follower catch up at the end.
A root is lost by pointing the symlink its log is reached through nowhere."""

from __future__ import annotations

import time
from pathlib import Path

from chaos.processes import ACTOR_TIMEOUT_S, CRASH_EXIT
from chaos.schedule import ControllerStep
from chaos.tables import current_replica_state


class ReplicaSteps:
    """The runner's replica steps and lost roots (a part of ``chaos.runner.Runner``)."""

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

