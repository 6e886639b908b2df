"""A replicated schedule's steps: copy rounds, elections (some after the leader's root is lost),
a follower cut off for a while, the races (a copier held between its reads and its commit while
another copier or an election runs; two copiers at once), and the two rounds that let every
follower catch up at the end. A root is lost by pointing the symlink its log is reached through
nowhere; a copier is held with lakelog's pause points (``log_store.crash``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from chaos.processes import ACTOR_TIMEOUT_S, CRASH_EXIT, Actor
from chaos.schedule import ControllerStep
from chaos.tables import current_replica_state
from log_store.crash import PAUSE_DIR_ENV, PAUSE_ENV

# A copier's first copy, the leader's and the follower's log ends read, nothing committed: where a
# race holds it. Every round gets there (a copier with records to copy gets to replicate:after_write
# too, but with acks: all producers copying their own records a round rarely has any).
PAUSE_POINT = "replicate:after_read@1"


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

    def point_link(self, index: int, target: Path) -> None:
        """Point root ``index``'s log link at ``target`` in one step (a new link renamed over the
        old): the path is never missing, so no writer can make a folder there meanwhile."""
        link = self.log_link(index)
        fresh = link.with_name(link.name + ".relink")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(target)
        fresh.replace(link)

    def cut_root(self, index: int, seconds: float) -> None:
        """The root's log is lost for ``seconds`` (reads and writes fail), then returns."""
        if index in self.cut:
            return
        self.cut.add(index)
        self.cuts.append([self.now(), None])
        self.point_link(index, self.dir / "nowhere")
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
        self.point_link(index, self.dir / "real-logs" / str(index))
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
        """A copy round, an election (the leader's root lost first, for some), a follower lost, or
        one of the races of ``start_replica_race``."""
        if step.kind == "lag":
            leader = self.leader_index()
            followers = [k for k in range(len(self.replica_roots)) if k != leader]
            self.cut_root(followers[step.pick % len(followers)], step.cut_for)
            self.pending_steps -= 1
            return
        if step.kind == "elect" and step.cut_for and attempt == 0:
            self.cut_root(self.leader_index(), step.cut_for)
        if attempt == 0 and (step.pause_for or step.racers > 1 or step.during_round):
            self.start_replica_race(i, step)
            return
        name = f"ctl{i}.{attempt}.0"
        crash = step.crash_at if attempt == 0 else None

        def finished() -> None:
            self.pending_steps -= 1

        if step.kind == "elect":
            self.log(f"ctl{i}: elect the next in-sync root")
        self.spawn(name, step.kind, {"leader": "next"} if step.kind == "elect" else {},
                   self.replica_actor_done(name, step.kind, self.now(), finished, crash,
                                           lambda: self.start_replica_step(i, step, attempt + 1)), crash)

    def replica_actor_done(self, name: str, kind: str, started: float, finished: Callable[[], None],
                           crash: str | None = None, rerun: Callable[[], None] | None = None) -> Callable[[int], None]:
        """What a copier's or an election's exit means: done; refused as lakelog documents (no in-sync
        root to elect, a racing election or round, a root lost meanwhile); dead at its crash point
        (``rerun``, as an operator would); or an anomaly. ``finished`` is called unless it is re-run."""
        def done(rc: int) -> None:
            event = self.last_event(name)
            if rc == CRASH_EXIT and rerun is not None:
                self.result.faults[f"crash {crash}"] += 1
                self.at(self.now() + 0.5, rerun)
                return
            if rc == 0:
                self.result.operations[f"{kind} done"] += 1
            elif rc == 1 and (event.get("error") in (
                    "ReplicationError", "ConcurrentTopicChangeError", "FencedLeaderEpochError", "StorageError")
                    or self.root_lost_since(started)):
                # no in-sync root to elect, a racing election, or a root lost meanwhile
                self.result.operations[f"{kind} refused ({event.get('error') or 'a root lost'})"] += 1
                if kind == "elect":
                    self.elect_the_leader_again(name, started, finished)
                    return
            else:
                self.unexpected(name, rc)
            finished()
        return done

    def elect_the_leader_again(self, name: str, started: float, finished: Callable[[], None]) -> None:
        """After an election that did not elect: the current leader elected again, as lakelog's
        messages tell an operator (an election that lost its compare-and-set or died after its fence
        left the leader fenced; electing it again un-fences it, and does nothing if it leads)."""
        again = f"{name}.again"
        self.log(f"{name} did not elect: elect the current leader again")
        self.spawn(again, "elect", {"leader": "current"}, self.replica_actor_done(again, "re-elect", started, finished))

    def start_replica_race(self, i: int, step: ControllerStep) -> None:
        """A copier that waits ``step.pause_for`` seconds between its reads and its commit (the pause
        point ``PAUSE_POINT``) while the schedule goes on; with ``racers`` 2 a second copier, with
        ``during_round`` an election, started once it waits (or at once, if it does not wait). A
        step of two processes is done when both have ended."""
        started = self.now()
        left = {"n": 2 if step.racers > 1 or step.during_round else 1}

        def finished() -> None:
            left["n"] -= 1
            if left["n"] == 0:
                self.pending_steps -= 1

        name = f"ctl{i}.0.0"
        folder = self.dir / "pauses" / name
        pause = None
        if step.pause_for:
            folder.mkdir(parents=True, exist_ok=True)
            pause = {PAUSE_ENV: PAUSE_POINT, PAUSE_DIR_ENV: str(folder)}
        copier = self.spawn(name, "replicate", {}, self.replica_actor_done(name, "replicate", started, finished),
                            pause=pause)
        then = None
        if left["n"] == 2:
            def then() -> None:
                kind = "elect" if step.during_round else "replicate"
                racing = copier.proc.poll() is None
                if racing:
                    self.result.operations["election racing a copy round" if step.during_round
                                           else "two copiers at once"] += 1
                self.log(f"ctl{i}: {'elect the next in-sync root' if step.during_round else 'a second copier'} "
                         f"while {name} {'runs' if racing else 'has ended'}")
                other = f"ctl{i}.0.1"
                self.spawn(other, kind, {"leader": "next"} if step.during_round else {},
                           self.replica_actor_done(other, kind, started, finished))
        if pause:
            self.hold_at_pause(copier, folder, step.pause_for, then)
        elif then:
            then()

    def hold_at_pause(self, copier: Actor, folder: Path, seconds: float, then: Callable[[], None] | None) -> None:
        """Once ``copier`` waits at ``PAUSE_POINT``: ``then``, and let it go on ``seconds`` later. A
        copier that ends first (a refused round, every follower unreachable) was never held: ``then``
        once it ended."""
        reached, go = folder / f"{PAUSE_POINT}.reached", folder / f"{PAUSE_POINT}.go"

        def release() -> None:
            go.touch()
            self.log(f"{copier.name} goes on to its commit")

        def look() -> None:
            if reached.exists():
                self.result.operations["copier held between its reads and its commit"] += 1
                self.log(f"{copier.name} waits between its reads and its commit, for {seconds:.1f}s")
                self.at(self.now() + seconds, release)
            elif copier.proc.poll() is not None:
                self.result.operations["copier to hold ended before its first copy"] += 1
                self.log(f"{copier.name} ended before its first copy: never held")
            else:
                self.at(self.now() + 0.1, look)
                return
            if then:
                then()

        look()

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

