"""Running the model: every interleaving of a scenario's actors, breadth first, each state once
(``explore``), or random interleavings for scenarios too large for that (``simulate``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import control_plane.replication.model.invariants as invariants
from control_plane.replication.model.invariants import final_violations
from control_plane.replication.model.leaders import step_elector, step_finisher
from control_plane.replication.model.readers import step_chaos, step_reader
from control_plane.replication.model.world import DONE, NEW, Actor, Step, Variant, World
from control_plane.replication.model.writers import step_copier, step_producer

# Many (world, actors) states share a world: its promises and its committed records are computed once.
violations = lru_cache(maxsize=1 << 18)(invariants.violations)
with_committed = lru_cache(maxsize=1 << 18)(invariants.with_committed)

STEPS: dict[str, Callable[[World, Actor, Variant], list[Step]]] = {
    "producer": step_producer, "copier": step_copier, "elector": step_elector, "finisher": step_finisher,
    "reader": step_reader, "chaos": step_chaos,
}


@dataclass
class Result:
    states: int = 0
    terminal: int = 0
    violations: list[tuple[str, list[str]]] = field(default_factory=list)  # (what, the steps that led there)

    @property
    def ok(self) -> bool:
        return not self.violations


def explore(world: World, actors: list[Actor], variant: Variant = NEW, limit: int = 2_000_000,
            final: Callable[[World], list[str]] | None = None) -> Result:
    """Every interleaving of ``actors`` from ``world``, each state once; stops at the first
    violation (with the steps that led to it) or after ``limit`` states."""
    result = Result()
    start = (with_committed(world), tuple(actors))
    parents: dict = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        world, actors = node
        result.states += 1
        if result.states > limit:
            raise RuntimeError(f"more than {limit} states: the scenario is too large to explore")
        live = [i for i, a in enumerate(actors) if a.pc != DONE]
        stopped = {a.name for a in actors if a.pc == DONE}
        if not live:
            result.terminal += 1
            found = final_violations(world, variant) + (final(world) if final else [])
            if found:
                result.violations.append(("; ".join(found), _trace(parents, node)))
                return result
            continue
        for i in live:
            actor = actors[i]
            if actor.after and actor.after not in stopped:
                continue
            moves = STEPS[actor.kind](world, actor, variant)
            if actor.may_crash:
                moves = moves + [(world, actor.at(DONE))]
            for w, a in moves:
                w = with_committed(w)
                child = (w, actors[:i] + (a,) + actors[i + 1:])
                if child in parents:
                    continue
                parents[child] = (node, f"{actor.name}: {actor.pc} -> {a.pc}")
                found = violations(w)
                if found:
                    result.violations.append(("; ".join(found), _trace(parents, child)))
                    return result
                queue.append(child)
    return result


def simulate(world: World, actors: list[Actor], variant: Variant = NEW, runs: int = 10_000, seed: int = 0,
             final: Callable[[World], list[str]] | None = None) -> Result:
    """``runs`` interleavings of ``actors`` drawn at random (seeded), each to its end: for scenarios
    too large to explore whole. Stops at the first violation, with its steps."""
    import random

    rng = random.Random(seed)
    result = Result()
    start = with_committed(world)
    for _ in range(runs):
        w, acts, steps = start, tuple(actors), []
        while True:
            stopped = {a.name for a in acts if a.pc == DONE}
            live = [i for i, a in enumerate(acts) if a.pc != DONE and (not a.after or a.after in stopped)]
            if not live:
                result.terminal += 1
                found = final_violations(w, variant) + (final(w) if final else [])
                if found:
                    result.violations.append(("; ".join(found), steps))
                    return result
                break
            i = rng.choice(live)
            actor = acts[i]
            moves = STEPS[actor.kind](w, actor, variant) + ([(w, actor.at(DONE))] if actor.may_crash else [])
            nw, na = rng.choice(moves)
            w = with_committed(nw)
            acts = acts[:i] + (na,) + acts[i + 1:]
            steps.append(f"{actor.name}: {actor.pc} -> {na.pc}")
            result.states += 1
            found = violations(w)
            if found:
                result.violations.append(("; ".join(found), steps))
                return result
    return result


def _trace(parents: dict, node) -> list[str]:
    steps = []
    while parents[node] is not None:
        node, label = parents[node]
        steps.append(label)
    return list(reversed(steps))
