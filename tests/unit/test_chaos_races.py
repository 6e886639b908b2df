"""The campaign's races, without Spark: a stand-in copier (a Python process that reaches lakelog's
real pause point ``replicate:after_read``) is held there by the runner for the step's seconds,
the racing process starts while it waits, and it goes on to its end once released."""

from __future__ import annotations

import heapq
import subprocess
import sys
import time

from chaos.processes import PROJECT, Actor
from chaos.replica_steps import PAUSE_POINT
from chaos.runner import Runner
from chaos.schedule import draw
from log_store.crash import PAUSE_DIR_ENV, PAUSE_ENV

STAND_IN = ("import time; from log_store.crash import crash_point; crash_point('replicate:after_read'); "
            "print(time.monotonic(), flush=True)")


def stand_in(runner: Runner, folder, reaches: bool) -> Actor:
    import os

    env = {**os.environ, PAUSE_ENV: PAUSE_POINT, PAUSE_DIR_ENV: str(folder)}
    code = STAND_IN if reaches else "print(0, flush=True)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT, env=env, stdout=subprocess.PIPE, text=True)
    return Actor(name="ctl3.0.0", kind="replicate", proc=proc, started=runner.now(), on_exit=lambda rc: None)


def run_until(runner: Runner, done, limit: float = 30.0) -> None:
    end = time.monotonic() + limit
    while not done() and time.monotonic() < end:
        while runner.events and runner.events[0][0] <= time.monotonic():
            heapq.heappop(runner.events)[2]()
        time.sleep(0.05)


def test_a_copier_is_held_at_its_pause_point_while_the_racer_starts_then_released(tmp_path):
    runner = Runner(draw(700), tmp_path, None)
    runner.t0 = time.monotonic()
    folder = tmp_path / "pauses"
    folder.mkdir()
    copier = stand_in(runner, folder, reaches=True)
    raced: list[bool] = []
    held_from = time.monotonic()
    runner.hold_at_pause(copier, folder, 1.5, lambda: raced.append(copier.proc.poll() is None))
    run_until(runner, lambda: copier.proc.poll() is not None)
    released_at = float(copier.proc.stdout.read().split()[0])
    assert raced == [True], "the racer started while the copier waited at its pause point"
    assert released_at - held_from >= 1.5, "held for the step's seconds"
    assert runner.result.operations["copier held between its reads and its commit"] == 1


def test_a_copier_that_ends_before_its_first_copy_is_never_held_and_the_racer_still_starts(tmp_path):
    runner = Runner(draw(700), tmp_path, None)
    runner.t0 = time.monotonic()
    copier = stand_in(runner, tmp_path, reaches=False)
    raced: list[bool] = []
    runner.hold_at_pause(copier, tmp_path, 5.0, lambda: raced.append(copier.proc.poll() is None))
    run_until(runner, lambda: bool(raced))
    assert raced == [False]
    assert runner.result.operations["copier to hold ended before its first copy"] == 1
