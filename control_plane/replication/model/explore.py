"""Running the model: every interleaving of a scenario's actors, breadth first, each state once
(``explore``), or random interleavings for scenarios too large for that (``simulate``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import control_plane.replication.model.invariants as invariants
from control_plane import model_check
from control_plane.model_check import Protocol, Result
from control_plane.replication.model.invariants import final_violations
from control_plane.replication.model.leaders import step_elector, step_finisher
from control_plane.replication.model.readers import step_chaos, step_reader
from control_plane.replication.model.world import NEW, Actor, Step, Variant, World
from control_plane.replication.model.writers import step_copier, step_producer

# Many (world, actors) states share a world: its promises and its committed records are computed once.
violations = lru_cache(maxsize=1 << 18)(invariants.violations)
with_committed = lru_cache(maxsize=1 << 18)(invariants.with_committed)

STEPS: dict[str, Callable[[World, Actor, Variant], list[Step]]] = {
    "producer": step_producer, "copier": step_copier, "elector": step_elector, "finisher": step_finisher,
    "reader": step_reader, "chaos": step_chaos,
}


def protocol() -> Protocol:
    """The model's parts, looked up at each run (a test may put another promise in place)."""
    return Protocol(steps=STEPS, violations=violations, final=final_violations, settle=with_committed)


def explore(world: World, actors: list[Actor], variant: Variant = NEW, limit: int = 2_000_000,
            final: Callable[[World], list[str]] | None = None) -> Result:
    """Every interleaving of ``actors`` from ``world``, each state once (``model_check.explore``)."""
    return model_check.explore(protocol(), world, actors, variant, limit, final)


def simulate(world: World, actors: list[Actor], variant: Variant = NEW, runs: int = 10_000, seed: int = 0,
             final: Callable[[World], list[str]] | None = None) -> Result:
    """``runs`` random interleavings of ``actors``, each to its end (``model_check.simulate``)."""
    return model_check.simulate(protocol(), world, actors, variant, runs, seed, final)
