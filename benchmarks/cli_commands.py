"""Small commands as a new user types them, each a new process from start to exit, on a fresh
local root: ``topics create``, ``produce`` of 100 records from a JSON Lines file, ``topics
describe``, ``consume`` of those 100 records to the terminal in a group, and ``audit`` of the
topic's log (judged by DuckDB in the process where it can, and with ``--engine spark`` by Spark's
jobs, a JVM started: the yardstick of the same audit). Beside them, in the
same run: the same commands of an earlier checkout (``--before``, e.g. a worktree of the commit
before the engine moved to delta-rs), and raw Delta: a new Python process appending the same 100
rows with delta-rs's ``write_deltalake`` (the floor of a process that imports pyarrow and delta-rs
and commits once).

    .venv/bin/python benchmarks/cli_commands.py [--repeats 3] [--before CHECKOUT]

Prints the median seconds of each and ratios; the figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]

RAW_APPEND = """
import sys, json
import pyarrow as pa
from deltalake import write_deltalake
rows = [json.loads(line) for line in open(sys.argv[2])]
write_deltalake(sys.argv[1], pa.Table.from_pylist([{"key": r["key"], "value": r["value"]} for r in rows]), mode="append")
"""


def timed(args: list[str], checkout: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    began = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=checkout, env=env, timeout=600)
    took = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-2000:]}")
    return took


def one_round(checkout: Path, folder: Path, source: Path) -> dict[str, float]:
    root = folder / f"root-{time.monotonic_ns()}"
    cli = [sys.executable, "-m", "jobs.cli", "--root", str(root)]
    return {
        "topics create": timed([*cli, "topics", "create", "--topic", "t", "--partitions", "4"], checkout),
        "produce 100 from a file": timed([*cli, "produce", "--topic", "t", "--input", str(source)], checkout),
        "topics describe": timed([*cli, "topics", "describe", "--topic", "t"], checkout),
        "consume 100 to the terminal": timed([*cli, "consume", "--topic", "t", "--group", "g", "--from-beginning",
                                              "--max-records", "100"], checkout),
        # a checkout before --engine: its log-only audit from a command failed (GX's session, without Delta)
        **({"audit of the log": timed([*cli, "audit", "--topic", "t", "--report", str(root / "a.md")], checkout),
            "audit of the log on Spark": timed([*cli, "audit", "--topic", "t", "--engine", "spark", "--report",
                                                str(root / "s.md")], checkout)}
           if "--engine" in (checkout / "jobs/commands/audit.py").read_text() else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default=None, help="an earlier checkout whose commands run in the same run")
    args = parser.parse_args()
    sides = {"now": PROJECT} | ({"before": Path(args.before).resolve()} if args.before else {})
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lakelog-cli-bench-") as tmp:
        folder = Path(tmp)
        source = folder / "in.jsonl"
        source.write_text("".join(json.dumps({"key": f"k{i % 7}", "value": f"v{i}"}) + "\n" for i in range(100)))
        times: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
        raw: list[float] = []
        for r in range(args.repeats):
            for side, checkout in sides.items():
                for what, took in one_round(checkout, folder, source).items():
                    times[side].setdefault(what, []).append(took)
                    print(f"round {r + 1} {side:6} {what:30} {took:6.2f} s", flush=True)
            raw.append(timed([sys.executable, "-c", RAW_APPEND, str(folder / f"raw-{r}"), str(source)], PROJECT))
            print(f"round {r + 1} raw    delta-rs append of 100 rows    {raw[-1]:6.2f} s", flush=True)
    floor = statistics.median(raw)
    print(f"\n{platform.platform()}, {os.cpu_count()} cores, load {load[0]:.2f} before, "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, median of {args.repeats}")
    head = f"{'command':30} {'now, s':>8} {'/ raw':>7}" + (f" {'before, s':>10} {'now / before':>13}" if "before" in sides else "")
    print(head)
    for what in times["now"]:
        now = statistics.median(times["now"][what])
        line = f"{what:30} {now:8.2f} {now / floor:7.1f}"
        if "before" in sides and what in times["before"]:
            then = statistics.median(times["before"][what])
            line += f" {then:10.2f} {now / then:13.2f}"
        print(line)
    print(f"{'raw delta-rs append of 100 rows':30} {floor:8.2f}")


if __name__ == "__main__":
    main()
