"""How the campaign judges a stream run's exit, without Spark: a run that failed with lakelog's
error for a batch whose files' root was lost after its plan (docs/replication.md) is expected
while a root was lost during the run, and the stream runs again on its checkpoint; the same
failure with no root lost (lakelog removing a file a planned batch reads), or another failure, is
an anomaly."""

from __future__ import annotations

import json
import time

import pytest

from chaos.processes import Actor
from chaos.runner import Runner
from chaos.schedule import draw

LOST_READ = {"event": "error", "error": "LeaderNotAvailableError",
             "message": "a file this micro-batch planned to read was missing when it was read (...)"}


def stream_run_ending(tmp_path, event: dict, root_lost: bool) -> Runner:
    """A seed-1822 runner whose first stream run wrote ``event`` and exited 1, with a root lost
    during the run or not."""
    schedule = draw(1822)
    assert schedule.stream is not None and schedule.replicas
    runner = Runner(schedule, tmp_path, None)
    runner.t0 = time.monotonic()
    exits = {}

    def spawn(name, kind, args, on_exit, *rest, **kw):
        exits[name] = on_exit
        runner.actors[name] = Actor(name=name, kind=kind, proc=Exited(1), started=runner.now(), on_exit=on_exit)
        return runner.actors[name]

    runner.spawn = spawn
    runner.start_stream(schedule.stream)
    (name, _on_exit), = exits.items()
    if root_lost:
        runner.cuts.append([runner.now(), runner.now() + 1.0])
    (tmp_path / "logs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "logs" / f"{name}.out").write_text(json.dumps(event) + "\n")
    runner.step()  # sees the exit as a run does: the actor leaves ``actors``, then its on_exit runs
    assert name not in runner.actors
    return runner


class Exited:
    """A process that has exited with ``rc``."""

    def __init__(self, rc: int) -> None:
        self.rc = rc

    def poll(self) -> int:
        return self.rc


def test_a_stream_run_failed_by_a_root_lost_during_it_runs_again(tmp_path):
    runner = stream_run_ending(tmp_path, LOST_READ, root_lost=True)
    assert runner.result.problems == []
    assert runner.result.operations["stream run failed: a root lost between a batch's plan and its read"] == 1
    assert len(runner.events) == 1, "the stream is started again"


@pytest.mark.parametrize("event, root_lost", [
    (LOST_READ, False),
    ({"event": "error", "error": "DataLossError", "message": "records of this batch were removed"}, True),
    ({"event": "ready"}, True),
], ids=["no-root-lost", "another-error", "no-error"])
def test_any_other_failed_stream_run_is_an_anomaly(tmp_path, event, root_lost):
    runner = stream_run_ending(tmp_path, event, root_lost)
    assert len(runner.result.problems) == 1 and runner.result.faults["unexpected actor failures"] == 1
    assert len(runner.events) == 1, "and the stream is started again"
