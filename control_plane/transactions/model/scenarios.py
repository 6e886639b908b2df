"""The model's scenarios: starts and the actors that race from them, each an interleaving class
the code must survive (``SCENARIOS``, in the default suite; ``SLOW``), and ``check`` to run one.
Every scenario ends with a timeout and a finisher that start once the others stopped: a crashed
producer's transaction is aborted, a decision without its markers is finished."""

from __future__ import annotations

from typing import NamedTuple

from control_plane.model_check import Actor, Protocol, Result, explore
from control_plane.transactions.model.invariants import final_violations, violations
from control_plane.transactions.model.steps import STEPS, finisher, initializer, producer, reader, timeout
from control_plane.transactions.model.world import NEW, Txn, Variant, World, start
from control_plane.transactions.rules import TxnState

PROTOCOL = Protocol(steps=STEPS, violations=violations, final=final_violations)


class Scenario(NamedTuple):
    world: World
    actors: list[Actor]


def _sweep(after: str) -> list[Actor]:
    return [timeout("sweep-timeout", after=after), finisher("sweep-finisher", after="sweep-timeout")]


def _ongoing(epoch: int = 0) -> World:
    """A transaction at ``epoch`` already open (partitions added), nothing appended yet."""
    world = start(epoch)
    return world._replace(txn=Txn(version=1, epoch=epoch, state=TxnState.ONGOING, partitions=frozenset((0, 1))))


SCENARIOS = {
    # a commit racing the timeout's abort, a reader looking meanwhile
    "commit-vs-timeout": lambda: Scenario(start(), [
        producer("P", 0, commit=True), timeout("T"), reader("R"), *_sweep("P")]),
    # an abort, read while it happens: nothing of it is ever delivered
    "abort": lambda: Scenario(start(), [producer("P", 0, commit=False), reader("R"), *_sweep("P")]),
    # a producer killed anywhere; the sweep aborts or finishes what it left
    "producer-killed": lambda: Scenario(start(), [
        producer("P", 0, commit=True, may_crash=True), reader("R", (0, 1)), *_sweep("P")]),
    # a zombie at epoch 0 racing a new instance's InitProducerId and its transaction
    "zombie": lambda: Scenario(_ongoing(0), [
        producer("Z", 0, commit=True), initializer("N", commit=True), reader("R", (0, 1, 0)), *_sweep("N")]),
    # a decision whose markers two finishers race to write, and a later transaction of the id
    "two-finishers": lambda: Scenario(start(), [
        producer("P", 0, commit=False, partitions=(0,), may_crash=True), finisher("F"),
        initializer("N", commit=True, partitions=(0,), after="P"), *_sweep("N")]),
    # an append retried after its transaction ended
    "late-retry": lambda: Scenario(start(), [
        producer("P", 0, commit=True, partitions=(0,), late_retry=True), reader("R", (0, 0)), *_sweep("P")]),
}

SLOW = {
    "zombie-and-timeout": lambda: Scenario(_ongoing(0), [
        producer("Z", 0, commit=True), initializer("N", commit=True), timeout("T"), reader("R", (0, 1, 0, 1)),
        *_sweep("N")]),
}


def check(name: str, variant: Variant = NEW, limit: int = 2_000_000) -> Result:
    scenario = {**SCENARIOS, **SLOW}[name]()
    return explore(PROTOCOL, scenario.world, scenario.actors, variant, limit)
