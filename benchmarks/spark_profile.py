"""Where a ``benchmarks/spark_format.py`` case spends its time (``--profile DIR``): Spark's jobs
from the session's event log, each case's window on the driver's clock, the Python side's calls
from the JVM source and sink (``pipelines.spark.bridge.FormatSide``) with their time and py4j
calls, and a cProfile of the driver's Python per case. Written to DIR as ``profile.txt``.
"""

from __future__ import annotations

import cProfile
import functools
import io
import json
import pstats
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import py4j.java_gateway


def event_log_conf(folder: Path) -> dict[str, str]:
    """The session settings that make Spark write its event log (jobs, stages) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(folder),
            "spark.eventLog.compress": "false"}


class Profile:
    """Collects the windows, bridge calls and cProfile stats of one benchmark run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)  # no event log makes it on a Connect session
        self.windows: list[tuple[str, float, float]] = []  # (case, start, end) in epoch seconds
        self.calls: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.py4j: dict[str, int] = defaultdict(int)
        self.stats: dict[str, pstats.Stats] = {}
        self.case = "setup"
        self._lock = threading.Lock()
        self._count_py4j()

    def _count_py4j(self) -> None:
        """Count py4j round trips per case (every JVM call from Python goes through one)."""
        send = py4j.java_gateway.GatewayClient.send_command
        profile = self

        @functools.wraps(send)
        def counted(client, command, *args, **kwargs):
            profile.py4j[profile.case] += 1
            return send(client, command, *args, **kwargs)

        py4j.java_gateway.GatewayClient.send_command = counted

    def wrap_side(self, side_class) -> None:
        """Time every call the JVM makes into ``side_class`` (run on py4j's callback threads)."""
        profile = self
        for name in ("readSchema", "open", "latestOffset", "batch", "commit", "prepareForTriggerAvailableNow",
                     "metrics", "read", "write"):
            original = getattr(side_class, name)

            def timed(self, *args, __original=original, __name=name):
                prof = cProfile.Profile()
                start = time.perf_counter()
                prof.enable()
                try:
                    return __original(self, *args)
                finally:
                    prof.disable()
                    profile.calls[profile.case][__name].append(time.perf_counter() - start)
                    profile.add_stats(f"{profile.case}:side", prof)

            setattr(side_class, name, timed)

    def add_stats(self, key: str, prof: cProfile.Profile) -> None:
        with self._lock:
            if key in self.stats:
                self.stats[key].add(prof)
            else:
                self.stats[key] = pstats.Stats(prof)

    @contextmanager
    def window(self, case: str, python: bool = False):
        """Mark ``case``'s time on the driver's clock (and cProfile the calling thread)."""
        self.case = case
        prof = cProfile.Profile() if python else None
        start = time.time()
        if prof:
            prof.enable()
        try:
            yield
        finally:
            if prof:
                prof.disable()
                self.add_stats(f"{case}:driver", prof)
            self.windows.append((case, start, time.time()))
            self.case = "between"

    def jobs(self) -> list[dict]:
        """Every job in the event log: id, start, end (epoch s), its stages' names."""
        out: dict[int, dict] = {}
        stage_names: dict[int, str] = {}
        for log in self.folder.rglob("*"):  # Spark 4 writes a folder of rolled event files
            if not log.is_file() or log.suffix == ".txt" or log.name.startswith("appstatus"):
                continue
            for line in log.read_text(errors="replace").splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                kind = ev.get("Event")
                if kind == "SparkListenerJobStart":
                    infos = ev.get("Stage Infos", [])
                    for s in infos:
                        stage_names[s["Stage ID"]] = s.get("Stage Name", "")
                    out[ev["Job ID"]] = {"id": ev["Job ID"], "start": ev["Submission Time"] / 1000,
                                         "name": (infos[-1].get("Stage Name", "") if infos else ""),
                                         "stages": len(infos)}
                elif kind == "SparkListenerJobEnd" and ev["Job ID"] in out:
                    out[ev["Job ID"]]["end"] = ev["Completion Time"] / 1000
        return sorted(out.values(), key=lambda j: j["start"])

    def write(self) -> Path:
        """The profile as text: per case its window, jobs, bridge calls and top Python functions."""
        jobs = self.jobs()
        buf = io.StringIO()
        for case, start, end in self.windows:
            buf.write(f"\n=== {case}: {end - start:.3f} s, py4j calls from the driver {self.py4j.get(case, 0)}\n")
            inside = [j for j in jobs if start <= j["start"] <= end]
            busy = sum(j.get("end", end) - j["start"] for j in inside)
            buf.write(f"jobs: {len(inside)}, {busy:.3f} s in jobs (overlaps counted twice)\n")
            for j in inside:
                buf.write(f"  job {j['id']:>4} +{j['start'] - start:7.3f} s  {j.get('end', end) - j['start']:7.3f} s"
                          f"  stages {j['stages']}  {j['name'][:90]}\n")
            for name, times in self.calls.get(case, {}).items():
                buf.write(f"  side.{name}: {len(times)} calls, {sum(times):.3f} s "
                          f"({', '.join(f'{t:.3f}' for t in times[:12])})\n")
            for key in (f"{case}:side", f"{case}:driver"):
                if key in self.stats:
                    out = io.StringIO()
                    self.stats[key].stream = out
                    self.stats[key].sort_stats("cumulative").print_stats(45)
                    buf.write(f"--- cProfile {key}\n{out.getvalue()}\n")
        path = self.folder / "profile.txt"
        path.write_text(buf.getvalue())
        (self.folder / "windows.json").write_text(json.dumps({"windows": self.windows, "py4j": self.py4j}))
        return path
