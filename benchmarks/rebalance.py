"""Rebalance benchmark: 64 partitions, 3 -> 4 members, eager vs cooperative, in one run.

Each member is its own process (tests/processes/group_workers.py) printing timed events. For each
protocol we start three members, wait until the group is stable, start a fourth, and measure
from the members' own events: partitions revoked and moved, time from the first revocation
until every partition is owned again, and how long partitions sat unowned. As the raw-Delta
yardstick, the time of one plain Delta commit (a one-row append) on the same machine.

With ``--shared-jvm`` the member processes attach to the benchmark's own JVM (``chaos.host``)
instead of starting one each: on a 2-core machine five JVMs mostly measure CPU contention, one
shared JVM measures what the protocol itself costs (each member is still its own OS process
with its own session, as in the fault campaign).

Run: make bench-groups  (or .venv/bin/python benchmarks/rebalance.py [PARTITIONS] [--shared-jvm])
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from chaos.host import GATEWAY_ENV, host_config  # noqa: E402
from control_plane.group.describe import ownership_violations  # noqa: E402

from control_plane.group.store import GroupTables  # noqa: E402
from control_plane.topics import TopicAdmin  # noqa: E402
from jobs.output import emit  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.producer import Producer  # noqa: E402

PROJECT = Path(__file__).resolve().parents[1]
console = Console(stderr=True)


class Member:
    def __init__(self, root: str, group: str, member_id: str, protocol: str, assignor: str, tmp: Path,
                 env: dict[str, str]) -> None:
        self.stop_file = tmp / f"stop-{group}-{member_id}"
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "tests" / "processes" / "group_workers.py"), root, "bench", group, member_id, protocol,
             assignor, str(tmp / f"sink-{group}"), str(self.stop_file), "100000"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=PROJECT, env=env,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def finish(self) -> None:
        self.stop_file.write_text("stop")
        self.proc.wait(timeout=300)


def wait_stable(tables: GroupTables, group: str, members: set[str], owned: int, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        gen = tables.generation(group)
        if gen and gen.member_ids() == members and len(gen.owner()) == owned:
            beats = tables.member_states(group)
            if all(beats[m].generation == gen.generation and beats[m].joining is None and len(beats[m].owned) ==
                   len(gen.partitions_of(m)) for m in members if m in beats) and set(beats) >= members:
                return
        time.sleep(0.5)
    raise SystemExit(f"group {group} did not settle")


def measure(spark, root: str, tmp: Path, protocol: str, partitions: int, env: dict[str, str]) -> dict:
    group = f"bench-{protocol}"
    assignor = "cooperative-sticky" if protocol == "cooperative" else "sticky"
    tables = GroupTables(spark, root)
    members = [Member(root, group, m, protocol, assignor, tmp, env) for m in ("a", "b", "c")]
    wait_stable(tables, group, {"a", "b", "c"}, partitions)
    before = tables.generation(group)
    console.print(f"[{protocol}] 3 members stable at generation {before.generation}; adding a fourth")
    t_start = time.time()
    members.append(Member(root, group, "d", protocol, assignor, tmp, env))
    wait_stable(tables, group, {"a", "b", "c", "d"}, partitions)
    t_stable = time.time()
    after = tables.generation(group)
    for m in members:
        m.finish()
    # Only the join's rebalance: members leaving afterwards revoke everything again.
    events = [e for m in members for e in m.events
              if t_start <= e["t"] <= t_stable and e["event"] in ("assigned", "revoked")]
    revoked_at: dict[int, float] = {}
    unowned: list[float] = []
    for e in sorted(events, key=lambda e: e["t"]):
        for p in e["partitions"]:
            if e["event"] == "revoked":
                revoked_at[p] = e["t"]
            elif p in revoked_at:
                unowned.append(e["t"] - revoked_at.pop(p))
    first_revoke = min((e["t"] for e in events if e["event"] == "revoked"), default=t_start)
    last_assign = max((e["t"] for e in events if e["event"] == "assigned"), default=first_revoke)
    moved = sum(1 for tp, o in after.owner().items() if before.owner().get(tp) != o)
    assert not ownership_violations(spark, root, group), "two owners seen"
    return {
        "protocol": protocol,
        "revoked": sum(len(e["partitions"]) for e in events if e["event"] == "revoked"),
        "moved": moved,
        "rebalances": after.generation - before.generation,
        "until_all_owned_s": round(last_assign - first_revoke, 2),
        "unowned_max_s": round(max(unowned, default=0.0), 2),
        "unowned_total_partition_s": round(sum(unowned), 1),
    }


def raw_commit_seconds(spark, tmp: Path, n: int = 10) -> float:
    path = str(tmp / "raw")
    spark.range(1).write.format("delta").save(path)
    started = time.perf_counter()
    for _ in range(n):
        spark.range(1).write.format("delta").mode("append").save(path)
    return (time.perf_counter() - started) / n


def main(partitions: int = 64, shared_jvm: bool = False) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="lakelog-bench-groups-"))
    root = str(tmp / "root")
    spark = build_session(host_config() if shared_jvm else SparkSettings())
    env = dict(os.environ)
    env.pop(GATEWAY_ENV, None)
    if shared_jvm:
        params = spark.sparkContext._gateway.gateway_parameters
        env[GATEWAY_ENV] = f"{params.port}:{params.auth_token}"
    try:
        TopicAdmin(spark, root).create("bench", partitions)
        records = spark.range(partitions * 20).selectExpr("cast(id as string) as key", "cast(id as string) as value", "id as sequence")
        Producer(spark, root, "bench", "bench").send(records)
        raw = raw_commit_seconds(spark, tmp)
        rows = [measure(spark, root, tmp, protocol, partitions, env) for protocol in ("eager", "cooperative")]
        for r in rows:
            r["until_all_owned_vs_raw_commit"] = round(r["until_all_owned_s"] / raw, 1)
        jvms = "one shared JVM" if shared_jvm else "a JVM per member"
        emit(rows, False, f"{partitions} partitions, 3 -> 4 members, {jvms} (raw Delta commit: {raw * 1000:.0f} ms)")
        print(json.dumps({"raw_commit_s": round(raw, 3), "shared_jvm": shared_jvm, "results": rows}))
    finally:
        spark.stop()
        if not os.environ.get("LAKELOG_BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partitions", nargs="?", type=int, default=64)
    parser.add_argument("--shared-jvm", action="store_true", help="members attach to the benchmark's JVM")
    args = parser.parse_args()
    main(args.partitions, args.shared_jvm)
