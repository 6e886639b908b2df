"""The controller's steps of a schedule: resizes (taken from the count the topic has when the step
runs), ticks and the upkeep steps, some run by racing controllers, some dying at a crash point and
re-run as an operator would. Replica steps go to ``chaos.replica_steps``."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from chaos.processes import CRASH_EXIT
from chaos.schedule import MAX_PARTITIONS, REPLICA_STEPS, ControllerStep
from chaos.tables import current_record


class ControllerSteps:
    """The runner's controller steps (a part of ``chaos.runner.Runner``)."""

    def waits_for_records(self, i: int) -> bool:
        """Actors start slowly on a busy host: a key compaction before any producer was told a
        batch on the topic is committed cleans nothing, so step ``i`` waits for one (four minutes
        at most: on a busy 2-core host the first batches came 100 s late)."""
        waiting = self.__dict__.setdefault("_waiting_since", {})
        since = waiting.setdefault(i, self.now())
        acks = [self.dir / "acks" / f"{pid}.jsonl" for pid, topic in self.topic_of.items() if topic == self.s.topic]
        return not any(a.exists() and a.stat().st_size for a in acks) and self.now() < since + 240

    def adapted(self, step: ControllerStep) -> tuple[ControllerStep, bool]:
        """``step`` resized from the count the topic has now (read with delta-rs): ``adapt_step``."""
        record = current_record(self.root, self.s.topic)
        if record is None:
            return step, False
        marked = [p["partition"] for p in record["partitions"] if p["mode"] == "ReadOnly"]
        return adapt_step(step, record["undeleted_partition_count"], marked)

    def start_step(self, i: int, step: ControllerStep, attempt: int, retired: bool = False) -> None:
        if step.kind in REPLICA_STEPS:
            self.start_replica_step(i, step, attempt)
            return
        if step.kind == "compact_keys" and attempt == 0 and self.waits_for_records(i):
            self.at(self.now() + 2, lambda: self.start_step(i, step, 0))
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
                        event.get("error") == "StorageError" or self.root_lost_since(started)
                        or (step.kind == "delete_records" and event.get("error") == "ReplicationError")):
                    # the leader's root is lost: the log cannot be changed until it returns or a
                    # root is elected; or a delete-records not yet copied to every in-sync root (an
                    # election moved the topic meanwhile): an operator runs the step again, as told
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


