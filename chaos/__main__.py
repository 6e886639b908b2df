"""``python -m chaos`` (``make chaos``): run many schedules against real Spark and Delta, check each.

    python -m chaos --schedules 100            # seeds 1..100
    python -m chaos --seeds 7,42 --verbose     # chosen seeds, every event printed
    python -m chaos --crash-points             # every named crash point, once each
    python -m chaos --seeds 1-3 --short        # trimmed schedules, as the default test suite runs them

Prints a line per schedule and, at the end, a table of what it ran (operations, faults by kind)
and what the checker found (anomalies by class). Exit code 1 if any anomaly was found; 130 if
interrupted (Ctrl-C) without one: the summary then covers the schedules that finished. Work
directories of failing schedules are kept under --workdir (default ./chaos-runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from chaos.runner import PROJECT, Runner, ScheduleResult
from chaos.schedule import draw

err = Console(stderr=True)
HOST_RESTART_EVERY = 20


class Host:
    """The shared JVM (``python -m chaos.host``), restarted every few schedules."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.gateway = ""
        self.used = 0

    def ensure(self) -> str:
        if self.proc is None or self.proc.poll() is not None or self.used >= HOST_RESTART_EVERY:
            self.stop()
            self.proc = subprocess.Popen([sys.executable, "-m", "chaos.host"], cwd=PROJECT, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("error: the campaign's Spark host did not start; run `make setup` first")
            self.gateway = json.loads(line)["gateway"]
            self.used = 0
        self.used += 1
        return self.gateway

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


def parse_seeds(args) -> list[int]:
    if args.seeds:
        out = []
        for part in args.seeds.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
        return out
    return list(range(args.seed_start, args.seed_start + args.schedules))


def summary_table(results: list[ScheduleResult], seconds: float) -> Table:
    ops, faults, anomalies = Counter(), Counter(), Counter()
    for r in results:
        ops.update(r.operations)
        faults.update(r.faults)
        anomalies.update(r.anomalies)
    table = Table(title=f"chaos: {len(results)} schedules in {seconds / 60:.1f} min, "
                        f"{sum(1 for r in results if r.anomaly_count)} with anomalies")
    table.add_column("what")
    table.add_column("kind")
    table.add_column("count", justify="right")
    for title, counts in (("operation", ops), ("fault", faults), ("anomaly", anomalies)):
        for kind, n in sorted(counts.items()):
            table.add_row(title, kind, str(n))
        if title == "anomaly" and not counts:
            table.add_row(title, "(none)", "0")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=100, help="how many seeds from --seed-start (default 100)")
    parser.add_argument("--seed-start", type=int, default=1)
    parser.add_argument("--seeds", default=None, help="explicit seeds: 3,7,10-12")
    parser.add_argument("--workdir", default=str(PROJECT / "chaos-runs"))
    parser.add_argument("--keep", action="store_true", help="keep the work directories of passing schedules too")
    parser.add_argument("--verbose", action="store_true", help="print every event")
    parser.add_argument("--crash-points", action="store_true", help="run each named crash point once instead")
    parser.add_argument("--short", action="store_true", help="trimmed schedules (what the default test suite runs)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(args.workdir).resolve()
    if args.crash_points:
        from chaos.crashpoints import run_all

        return run_all(workdir / "crash-points", verbose=args.verbose)
    seeds = parse_seeds(args)
    # A shell starts background jobs with SIGINT ignored, and Python keeps that: a campaign left
    # running with `&` could then not be stopped with `kill -INT` and keep its summary.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    host = Host()
    results: list[ScheduleResult] = []
    interrupted = False
    started = time.monotonic()
    say = (lambda line: err.print(line, highlight=False, markup=False)) if args.verbose else (lambda line: None)
    try:
        for n, seed in enumerate(seeds, 1):
            run_dir = workdir / f"seed-{seed}"
            shutil.rmtree(run_dir, ignore_errors=True)
            result = Runner(draw(seed, short=args.short), run_dir, host.ensure(), progress=say).run()
            results.append(result)
            verdict = "ok" if not result.anomaly_count else f"ANOMALIES {result.anomalies}"
            err.print(f"[{n}/{len(seeds)}] seed {seed}: {verdict} ({result.seconds:.0f}s, "
                      f"{sum(result.faults.values())} faults)", highlight=False, markup=False)
            for problem in result.problems[:5]:
                err.print(f"    {problem[:400]}", highlight=False, markup=False)
            if not result.anomaly_count and not args.keep:
                shutil.rmtree(run_dir, ignore_errors=True)
    except KeyboardInterrupt:  # hours of schedules: Ctrl-C still reports the ones that finished
        interrupted = True
        err.print(f"interrupted: the summary covers the {len(results)} schedule(s) that finished; the one "
                  "running was dropped", highlight=False, markup=False)
    finally:
        host.stop()
    seconds = time.monotonic() - started
    summary = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "schedules": len(results),
        "seconds": round(seconds), "interrupted": interrupted,
        "failing_seeds": [r.seed for r in results if r.anomaly_count],
        "results": [r.to_dict() for r in results],
    }
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "results"}))
    else:
        Console().print(summary_table(results, seconds))
        if summary["failing_seeds"]:
            Console().print(f"failing seeds: {summary['failing_seeds']} (work directories under {workdir})")
    return 1 if summary["failing_seeds"] else 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
