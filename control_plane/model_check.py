"""Checking a protocol's model over interleavings of its actors: every interleaving, breadth
first, each (world, actors) state once (``explore``), or random interleavings for models too large
for that (``simulate``). The models (replication's, transactions') give their worlds, actors, steps
and promises; this module only runs them."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

DONE = "done"


class Actor(NamedTuple):
    """One process: its kind, where it is (``pc``), what it read (``v``: a small dict as a tuple)."""

    name: str
    kind: str
    pc: str
    v: tuple = ()
    may_crash: bool = False
    after: str = ""  # the actor that must have stopped before this one starts (an operator's next command)

    def get(self, key: str, default=None):
        for k, value in self.v:
            if k == key:
                return value
        return default

    def at(self, pc: str, **changes) -> "Actor":
        values = dict(self.v)
        values.update(changes)
        return self._replace(pc=pc, v=tuple(sorted(values.items(), key=lambda kv: kv[0])))


@dataclass(frozen=True)
class Protocol:
    """A model's moving parts: ``steps[kind](world, actor, variant)`` lists the (world, actor)
    pairs one step of an actor may lead to; ``violations(world)`` what is wrong after any step;
    ``final(world, variant)`` what is wrong once every actor stopped; ``settle(world)`` what the
    world remembers after each step (identity by default)."""

    steps: dict[str, Callable[[Any, Actor, Any], list[tuple[Any, Actor]]]]
    violations: Callable[[Any], list[str]]
    final: Callable[[Any, Any], list[str]]
    settle: Callable[[Any], Any] = lambda world: world


@dataclass
class Result:
    states: int = 0
    terminal: int = 0
    violations: list[tuple[str, list[str]]] = field(default_factory=list)  # (what, the steps that led there)

    @property
    def ok(self) -> bool:
        return not self.violations


def _moves(protocol: Protocol, world, actor: Actor, variant) -> list:
    moves = protocol.steps[actor.kind](world, actor, variant)
    return moves + [(world, actor.at(DONE))] if actor.may_crash else moves


def _live(actors) -> list[int]:
    stopped = {a.name for a in actors if a.pc == DONE}
    return [i for i, a in enumerate(actors) if a.pc != DONE and (not a.after or a.after in stopped)]


def explore(protocol: Protocol, world, actors: list[Actor], variant, limit: int = 2_000_000,
            final: Callable[[Any], list[str]] | None = None) -> Result:
    """Every interleaving of ``actors`` from ``world``, each state once; stops at the first
    violation (with the steps that led to it) or after ``limit`` states."""
    result = Result()
    start = (protocol.settle(world), tuple(actors))
    parents: dict = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        world, actors = node
        result.states += 1
        if result.states > limit:
            raise RuntimeError(f"more than {limit} states: the scenario is too large to explore")
        if all(a.pc == DONE for a in actors):
            result.terminal += 1
            found = protocol.final(world, variant) + (final(world) if final else [])
            if found:
                result.violations.append(("; ".join(found), _trace(parents, node)))
                return result
            continue
        for i in _live(actors):
            actor = actors[i]
            for w, a in _moves(protocol, world, actor, variant):
                w = protocol.settle(w)
                child = (w, actors[:i] + (a,) + actors[i + 1:])
                if child in parents:
                    continue
                parents[child] = (node, f"{actor.name}: {actor.pc} -> {a.pc}")
                found = protocol.violations(w)
                if found:
                    result.violations.append(("; ".join(found), _trace(parents, child)))
                    return result
                queue.append(child)
    return result


def simulate(protocol: Protocol, world, actors: list[Actor], variant, runs: int = 10_000, seed: int = 0,
             final: Callable[[Any], list[str]] | None = None) -> Result:
    """``runs`` interleavings of ``actors`` drawn at random (seeded), each to its end: for scenarios
    too large to explore whole. Stops at the first violation, with its steps."""
    rng = random.Random(seed)
    result = Result()
    start = protocol.settle(world)
    for _ in range(runs):
        w, acts, steps = start, tuple(actors), []
        while True:
            live = _live(acts)
            if not live:
                result.terminal += 1
                found = protocol.final(w, variant) + (final(w) if final else [])
                if found:
                    result.violations.append(("; ".join(found), steps))
                    return result
                break
            i = rng.choice(live)
            actor = acts[i]
            nw, na = rng.choice(_moves(protocol, w, actor, variant))
            w = protocol.settle(nw)
            acts = acts[:i] + (na,) + acts[i + 1:]
            steps.append(f"{actor.name}: {actor.pc} -> {na.pc}")
            result.states += 1
            found = protocol.violations(w)
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
