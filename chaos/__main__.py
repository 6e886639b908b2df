"""``python -m chaos`` (``make chaos``): run many schedules against real Spark and Delta, check each.

    python -m chaos --schedules 100            # seeds 1..100
    python -m chaos --seeds 7,42 --verbose     # chosen seeds, every event printed
    python -m chaos --crash-points             # every named crash point, once each
    python -m chaos --seeds 1-3 --short        # trimmed schedules, as the default test suite runs them
    python -m chaos --seeds 1-100 --resume     # go on with a run stopped earlier (same seeds, same code)
    python -m chaos --kafka --schedules 5      # the first 5 seeds whose schedules draw Kafka's clients
    python -m chaos --compacted --schedules 5  # the first 5 seeds whose schedules draw a compacted topic
    python -m chaos --transactions --schedules 5  # ... whose schedules draw transactional copiers

Prints a line per schedule and, at the end, a table of what it ran (operations, faults by kind)
and what the checker found (anomalies by class). Exit code 1 if any anomaly was found; 130 if
interrupted (Ctrl-C) without one: the summary then covers the schedules that finished. Work
directories of failing schedules are kept under --workdir (default ./chaos-runs).

The summary (``<workdir>/summary.json``) is written after every schedule, with the commit of the
code under test. A run of 100 full schedules takes hours: stopped (Ctrl-C, a killed session, a
reboot), it goes on with ``--resume`` from the first seed without a result, provided the seeds
and the code (``CODE_PATHS``: documents may change) are the same; the summary then covers the whole run and says how many sittings it took.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
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


# What a campaign's result depends on: lakelog's code, the campaign's, their configuration. Documents
# (RELIABILITY.md, the README) may change between sittings of one run.
CODE_PATHS = ("log_store", "control_plane", "pipelines", "serve", "jobs", "chaos", "conf", "pyproject.toml")


def code_under_test() -> str:
    """The git trees of CODE_PATHS at HEAD, with "+changes" when the working tree differs there
    (or "unknown" outside git)."""
    try:
        trees = subprocess.run(["git", "rev-parse", *(f"HEAD:{p}" for p in CODE_PATHS)], cwd=PROJECT,
                               capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS],
                               cwd=PROJECT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    code = hashlib.sha1(trees.stdout.encode()).hexdigest()[:12]
    return code + ("+changes" if dirty.stdout.strip() else "")


def resumed(path: Path, seeds: list[int], code: str) -> dict:
    """The earlier sittings' summary of this run, checked to be the same run (seeds, code)."""
    if not path.exists():
        raise SystemExit(f"error: --resume found no earlier run ({path} is missing): run without --resume to start one")
    before = json.loads(path.read_text())
    if before.get("seeds") != seeds:
        raise SystemExit(f"error: --resume: {path} is a run of other seeds ({len(before.get('seeds') or [])} planned); "
                         "give the same --seeds/--schedules, or run without --resume to start anew")
    if before.get("code") != code or code == "unknown" or code.endswith("+changes"):
        raise SystemExit(f"error: --resume: {path} ran code {before.get('code')}, this tree is {code}: results of "
                         "different code do not add up to one run; commit, then run without --resume to start anew")
    return before


def drawn(args) -> tuple[str, Callable[[int], bool]] | None:
    """What the seeds must draw (``--kafka``, ``--compacted``, ``--transactions``: all given), and
    whether a seed's schedule does; None when any seed goes."""
    wanted = [(name, has) for flag, name, has in (
        ("kafka", "Kafka's clients (--kafka)", lambda s: s.kafka),
        ("compacted", "a compacted topic (--compacted)", lambda s: s.compaction is not None),
        ("transactions", "transactions (--transactions)", lambda s: s.transactions is not None),
    ) if getattr(args, flag, False)]
    if not wanted:
        return None
    def fits(seed: int) -> bool:
        schedule = draw(seed)
        return all(has(schedule) for _, has in wanted)
    return " and ".join(name for name, _ in wanted), fits


def parse_seeds(args) -> list[int]:
    """The seeds to run: ``--seeds``, or ``--schedules`` from ``--seed-start``; with ``--kafka``
    or ``--compacted`` only seeds whose schedules draw what they ask for (``--schedules`` then
    counts those)."""
    wanted = drawn(args)
    if args.seeds:
        out = []
        for part in args.seeds.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
        return [s for s in out if wanted[1](s)] if wanted else out
    if not wanted:
        return list(range(args.seed_start, args.seed_start + args.schedules))
    out, seed = [], args.seed_start
    while len(out) < args.schedules:
        if wanted[1](seed):
            out.append(seed)
        seed += 1
    return out


def compaction_summary(results: list[ScheduleResult]) -> dict:
    """How many schedules had a compacted topic, how many key compactions ran (by the schedule's
    steps), finished, were killed at a crash point, and what the partitions' cleanings removed."""
    ops, faults, stats = Counter(), Counter(), Counter()
    for r in results:
        ops.update(r.operations)
        faults.update(r.faults)
        stats.update({k: v for k, v in r.stats.items() if isinstance(v, int)})
    return {"schedules": sum(1 for r in results if r.stats.get("compacted_topic")),
            "runs": ops["compact_keys runs"], "done": ops["compact_keys done"],
            "killed": sum(n for k, n in faults.items() if k.startswith("crash compaction:")),
            "partition_cleanings": ops["partition cleanings recorded"],
            "records_removed": stats["records_compacted"], "tombstones_removed": stats["tombstones_removed"]}


def summary_table(results: list[ScheduleResult], seconds: float, sittings: int = 1) -> Table:
    ops, faults, anomalies = Counter(), Counter(), Counter()
    for r in results:
        ops.update(r.operations)
        faults.update(r.faults)
        anomalies.update(r.anomalies)
    table = Table(title=f"chaos: {len(results)} schedules in {seconds / 60:.1f} min, "
                        f"{sum(1 for r in results if r.anomaly_count)} with anomalies"
                        + (f" ({sittings} sittings)" if sittings > 1 else ""))
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
    parser.add_argument("--kafka", action="store_true",
                        help="only schedules with Kafka's clients through `lakelog serve` (seeds that draw none are skipped)")
    parser.add_argument("--compacted", action="store_true",
                        help="only schedules with a compacted topic (seeds that draw none are skipped)")
    parser.add_argument("--transactions", action="store_true",
                        help="only schedules with transactional copiers (seeds that draw none are skipped)")
    parser.add_argument("--resume", action="store_true",
                        help="go on with the run in --workdir stopped earlier: same seeds, same committed code")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(args.workdir).resolve()
    if args.crash_points:
        from chaos.crashpoints import run_all

        return run_all(workdir / "crash-points", verbose=args.verbose)
    seeds = parse_seeds(args)
    if not seeds:
        raise SystemExit(f"error: none of these seeds draws a schedule with {drawn(args)[0]}")
    code = code_under_test()
    summary_path = workdir / "summary.json"
    earlier = resumed(summary_path, seeds, code) if args.resume else {}
    results = [ScheduleResult.from_dict(r) for r in earlier.get("results", [])]
    done = {r.seed for r in results}
    todo = [s for s in seeds if s not in done]
    if earlier:
        err.print(f"resuming: {len(done)} of {len(seeds)} schedules done in {earlier.get('sittings', 1)} sitting(s); "
                  f"{len(todo)} to go", highlight=False, markup=False)
    # A shell starts background jobs with SIGINT ignored, and Python keeps that: a campaign left
    # running with `&` could then not be stopped with `kill -INT` and keep its summary.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    host = Host()
    interrupted = False
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)

    def summary() -> dict:
        return {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "code": code, "seeds": seeds,
            "schedules": len(results), "complete": len(results) == len(seeds),
            "sittings": earlier.get("sittings", 0) + 1,
            "seconds": round(earlier.get("seconds", 0) + time.monotonic() - started), "interrupted": interrupted,
            "failing_seeds": [r.seed for r in results if r.anomaly_count],
            "compaction": compaction_summary(results),
            "results": [r.to_dict() for r in results],
        }

    say = (lambda line: err.print(line, highlight=False, markup=False)) if args.verbose else (lambda line: None)
    try:
        for seed in todo:
            run_dir = workdir / f"seed-{seed}"
            shutil.rmtree(run_dir, ignore_errors=True)
            result = Runner(draw(seed, short=args.short), run_dir, host.ensure(), progress=say).run()
            results.append(result)
            summary_path.write_text(json.dumps(summary(), indent=2))  # a killed run loses at most one schedule
            verdict = "ok" if not result.anomaly_count else f"ANOMALIES {result.anomalies}"
            err.print(f"[{len(results)}/{len(seeds)}] seed {seed}: {verdict} ({result.seconds:.0f}s, "
                      f"{sum(result.faults.values())} faults)", highlight=False, markup=False)
            for problem in result.problems[:5]:
                err.print(f"    {problem[:400]}", highlight=False, markup=False)
            if not result.anomaly_count and not args.keep:
                shutil.rmtree(run_dir, ignore_errors=True)
    except KeyboardInterrupt:  # hours of schedules: Ctrl-C still reports the ones that finished
        interrupted = True
        err.print(f"interrupted: the summary covers the {len(results)} schedule(s) that finished (`--resume` goes "
                  "on from there); the one running was dropped", highlight=False, markup=False)
    finally:
        host.stop()
    final = summary()
    summary_path.write_text(json.dumps(final, indent=2))
    if args.json:
        print(json.dumps({k: v for k, v in final.items() if k not in ("results", "seeds")}))
    else:
        Console().print(summary_table(results, final["seconds"], final["sittings"]))
        if final["failing_seeds"]:
            Console().print(f"failing seeds: {final['failing_seeds']} (work directories under {workdir})")
    return 1 if final["failing_seeds"] else 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
