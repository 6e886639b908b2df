"""How the campaign's runner judges a copier's exit: a zombie (frozen while a successor took its
transactional id) that, thawed, goes on to the crash point its run was given has done what it was
told, not failed; any other exit of a zombie but fenced or done is an actor failure."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from chaos.plans import CopierPlan
from chaos.processes import CRASH_EXIT
from chaos.txn_steps import TxnSteps

PLAN = CopierPlan(transactional_id="copier0", group="copier0", outputs=("o",), batch=10, start_at=0.0,
                  kill_at=None, crash_at="txn:after_topic_markers@2", freeze_at=1.0, freeze_for=1.0,
                  restart_after=1.0, abort_every=0)


class Steps(TxnSteps):
    def __init__(self, tmp_path) -> None:
        self.dir, self.stopping, self.exits = tmp_path, False, {}
        self.result = SimpleNamespace(faults=Counter(), operations=Counter(), problems=[])
        self.txn_init()

    def spawn(self, name, kind, args, on_exit, crash_at=None):
        self.exits[name] = on_exit

    def last_event(self, name):
        return {}

    def unexpected(self, name, rc):
        self.result.problems.append(f"{name}: exit {rc}")

    def at(self, when, what):
        pass

    def now(self):
        return 0.0


@pytest.mark.parametrize("rc, fault, problem", [(CRASH_EXIT, "crash txn:after_topic_markers", False), (3, None, True)])
def test_a_thawed_zombie_at_its_own_crash_point_is_a_crash_not_a_failure(tmp_path, rc, fault, problem):
    steps = Steps(tmp_path)
    steps.start_copier(0, PLAN)
    steps.txn_zombies.add("copier0.1")  # frozen; a successor started under its id
    steps.exits["copier0.1"](rc)
    assert bool(steps.result.problems) == problem
    if fault:
        assert steps.result.faults[fault] == 1
