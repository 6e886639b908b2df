"""Every named crash point (log_store.crash.POINTS), once each: die there, recover, check.

Each scenario is a short, fixed sequence of actor processes (``chaos.actors``) attached to the
campaign's host JVM: set up, run the victim with ``LAKELOG_CRASH_AT`` (it must exit 86 at that
step), run what a user would run next (the same command again, or a fresh member), then check
the topic with the independent checker plus the scenario's own assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from deltalake import DeltaTable

from chaos import checker, checker_reads
from chaos.host import GATEWAY_ENV
from chaos.processes import PROJECT
from chaos.tables import drain_gap
from log_store.crash import CRASH_ENV, CRASH_EXIT_CODE, POINTS

TOPIC = "crash"
SESSION_MS = 6000


@dataclass
class Scene:
    """One crash point's run: a work directory, the actors it started, what it found."""

    point: str
    dir: Path
    gateway: str
    problems: list[str] = field(default_factory=list)
    producers: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> str:
        return str(self.dir / "root")

    def actor(self, name: str, kind: str, args: dict, crash: str | None = None, wait: bool = True):
        env = {**os.environ, GATEWAY_ENV: self.gateway, "PYTHONUNBUFFERED": "1"}
        env.pop(CRASH_ENV, None)
        if crash:
            env[CRASH_ENV] = crash
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        out = open(self.dir / "logs" / f"{name}.out", "a")
        proc = subprocess.Popen([sys.executable, "-m", "chaos.actors", kind, json.dumps({"root": self.root, "topic": TOPIC, **args})],
                                cwd=PROJECT, env=env, stdout=out, stderr=open(self.dir / "logs" / f"{name}.err", "a"))
        if not wait:
            return proc
        return proc.wait(timeout=300)

    def events(self, name: str) -> list[dict]:
        path = self.dir / "logs" / f"{name}.out"
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.startswith("{")] if path.exists() else []

    def expect(self, what: str, ok: bool) -> None:
        if not ok:
            self.problems.append(what)

    # -- building blocks ---------------------------------------------------------------------
    def create(self, partitions: int = 3, crash: str | None = None, replicas: list[str] | None = None,
               configs: list[str] | None = None) -> int:
        return self.actor("create", "create", {"partitions": partitions, "replicas": replicas, "configs": configs}, crash)

    def produce(self, pid: str, n: int = 200, batch: int = 50, crash: str | None = None, wait: bool = True,
                acks: str = "1"):
        path = self.dir / f"{pid}.jsonl"
        if not path.exists():
            path.write_text("".join(json.dumps({"key": f"k{i % 13}", "value": f"{pid}:{i}"}) + "\n" for i in range(n)))
        self.producers[pid] = str(path)
        return self.actor(pid, "produce", {"producer_id": pid, "input": str(path), "records": n, "batch": batch,
                                           "ack_file": str(self.dir / f"{pid}.acks"), "acks": acks}, crash, wait)

    def member(self, group: str, name: str, protocol: str = "eager", crash: str | None = None, wait: bool = True,
               idle_s: float = 4.0, batch: int = 40):
        self.groups[group] = f"{self.root}/sinks/{group}"
        return self.actor(name, "member", {
            "group": group, "member_id": name, "protocol": protocol,
            "assignor": "cooperative-sticky" if protocol == "cooperative" else "range", "sink": self.groups[group],
            "stop_file": str(self.dir / f"stop-{group}"), "batch": batch, "session_ms": SESSION_MS,
            "heartbeat_ms": 1000, "idle_s": idle_s}, crash, wait)

    def controller(self, kind: str, crash: str | None = None, **args) -> int:
        return self.actor(f"{kind}-{len(list((self.dir / 'logs').glob(f'{kind}-*.out'))) if (self.dir / 'logs').exists() else 0}",
                          kind, args, crash)

    def wait_for(self, what: str, test: Callable[[], bool], timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if test():
                return True
            time.sleep(0.5)
        self.problems.append(f"timed out waiting for {what}")
        return False

    def check(self) -> None:
        for group in self.groups:
            gap = drain_gap(self.root, TOPIC, group)
            self.expect(f"group {group} has not consumed everything: {gap}", gap is None)
        acked = {}
        for pid in self.producers:
            acks = self.dir / f"{pid}.acks"
            acked[pid] = {s for line in (acks.read_text().splitlines() if acks.exists() else [])
                          for s in range(json.loads(line)["lo"], json.loads(line)["hi"])}
        found = checker.check(self.root, TOPIC, self.producers, acked, self.groups)
        for kind, n in found.counts.items():
            if n:
                self.problems.append(f"{kind}: {n} ({'; '.join(found.samples[kind][:2])})")


# -- the scenarios -----------------------------------------------------------------------------
def crashed(scene: Scene, rc: int) -> None:
    scene.expect(f"the victim exited {rc}, not {CRASH_EXIT_CODE} at {scene.point}", rc == CRASH_EXIT_CODE)


def scenario_create(scene: Scene) -> None:
    crashed(scene, scene.create(crash=scene.point))
    scene.expect("re-running create must finish it", scene.create() == 0)
    scene.expect("producing after the recovered create", scene.produce("p0") == 0)
    scene.expect("consuming after the recovered create", scene.member("g", "g-a") == 0)


def scenario_produce(scene: Scene) -> None:
    scene.create()
    crashed(scene, scene.produce("p0", crash=f"{scene.point}@2"))
    scene.controller("alter", partitions=5)  # the re-run meets a resize: its records now hash elsewhere
    scene.expect("the re-run producer must finish", scene.produce("p0") == 0)
    scene.expect("a consumer reads it all", scene.member("g", "g-a") == 0)


def scenario_consume(scene: Scene) -> None:
    scene.create()
    scene.produce("p0", n=300)
    crashed(scene, scene.member("g", "g-a", crash=f"{scene.point}@2"))
    scene.expect("a restarted member must finish", scene.member("g", "g-b") == 0)


def scenario_group(scene: Scene) -> None:
    """Two members settle; a third joins, which makes the first (the leader, smallest id) crash at
    the point on its next rebalance step; the others carry on and drain the topic."""
    scene.create(partitions=4)
    scene.produce("p0", n=400)
    a = scene.member("g", "g-a", crash=f"{scene.point}@2" if scene.point != "group:after_revoke" else scene.point,
                     wait=False, idle_s=1e9, batch=20)
    b = scene.member("g", "g-b", wait=False, idle_s=1e9, batch=20)
    scene.wait_for("a and b to own partitions", lambda: any(e["event"] == "assigned" for e in scene.events("g-a"))
                   and any(e["event"] == "assigned" for e in scene.events("g-b")))
    c = scene.member("g", "g-c", wait=False, idle_s=1e9, batch=20)
    try:
        crashed(scene, a.wait(timeout=180))
    except subprocess.TimeoutExpired:
        a.kill()
        scene.problems.append(f"g-a did not reach {scene.point}")
    scene.wait_for("the group to drain", lambda: drain_gap(scene.root, TOPIC, "g") is None, timeout=240)
    (scene.dir / "stop-g").write_text("stop")
    for proc in (b, c):
        scene.expect("a surviving member leaves cleanly", proc.wait(timeout=120) == 0)


def scenario_alter(scene: Scene) -> None:
    scene.create(partitions=3)
    scene.produce("p0")
    crashed(scene, scene.controller("alter", crash=scene.point, partitions=5))
    scene.expect("re-running the alter must finish it", scene.controller("alter", partitions=5) == 0)
    scene.expect("producing after it", scene.produce("p1") == 0)
    scene.expect("a consumer reads it all", scene.member("g", "g-a") == 0)


def scenario_retire(scene: Scene) -> None:
    scene.create(partitions=4)
    scene.produce("p0")
    scene.member("g", "g-a")  # drains everything
    scene.controller("alter", partitions=2)
    crashed(scene, scene.controller("tick", crash=scene.point, delay=0.0))
    scene.expect("re-running the tick must finish it", scene.controller("tick", delay=0.0) == 0)
    scene.expect("growing back over the retired numbers", scene.controller("alter", partitions=4) == 0)
    scene.expect("producing after it", scene.produce("p1") == 0)
    scene.expect("the group reads the rest", scene.member("g", "g-b") == 0)


def scenario_delete(scene: Scene) -> None:
    """A deletion killed at the point is finished by ``controller tick`` (the first three points)
    or by running it again; the topic created again is new: a new producer and group check it."""
    scene.create(partitions=3)
    scene.produce("p0")
    scene.member("g", "g-a")
    crashed(scene, scene.controller("delete", crash=scene.point))
    if scene.point in ("delete:after_mark", "delete:after_fence", "delete:after_purge"):
        scene.expect("a tick must finish the deletion", scene.controller("tick", delay=0.0) == 0)
    rerun = scene.controller("delete")
    scene.expect(f"re-running the delete must finish it or say it is done (exit {rerun})", rerun in (0, 1))
    scene.producers.clear()
    scene.groups.clear()
    scene.expect("creating the topic again", scene.create(partitions=2) == 0)
    scene.expect("producing to the new topic", scene.produce("p1") == 0)
    scene.expect("a new group reads all of the new topic", scene.member("g-new", "g-new-a") == 0)


def scenario_spark_sink(scene: Scene) -> None:
    """A stream writing through format("lakelog") dies after a micro-batch landed in the log,
    before Spark recorded it; the query started again replays it, which lands nothing twice."""
    from deltalake import DeltaTable as RsTable

    from control_plane.layout import RootLayout

    scene.create(partitions=3)
    path = scene.dir / "stream.jsonl"
    path.write_text("".join(json.dumps({"key": f"k{i % 13}", "value": f"s:{i}"}) + "\n" for i in range(200)))
    args = {"input": str(path), "batch": 50, "source": str(scene.dir / "source"),
            "checkpoint": str(scene.dir / "checkpoint"), "own_jvm": True}
    rc = scene.actor("stream", "stream_write", args, crash=f"{scene.point}@2")
    scene.expect(f"the query must fail with its crashed worker (exit {rc})", rc != 0)
    scene.expect("the query started again finishes", scene.actor("stream", "stream_write", args) == 0)
    topics = RsTable(RootLayout(scene.root).control("topics")).to_pyarrow_table().to_pylist()
    log = RsTable(next(r["location"] for r in topics if r["topic"] == TOPIC)).to_pyarrow_table(columns=["value"])
    values = sorted(v.decode() for v in log.column("value").to_pylist())
    scene.expect(f"each record once in the log ({len(values)} of 200)", values == sorted(f"s:{i}" for i in range(200)))
    scene.expect("a group reads all of it", scene.member("g", "g-a") == 0)


def scenario_retention(scene: Scene) -> None:
    """A delete-records dies before or after its log commit; running it again finishes it (the
    control plane gets its row), and a group that had read part reports the rest expired."""
    scene.create(partitions=2)
    scene.produce("p0")
    scene.member("g", "g-a", batch=40, idle_s=1.0)  # reads everything: nothing it owes is deleted
    scene.produce("p1")
    crashed(scene, scene.controller("delete_records", crash=scene.point, pick=0, fraction=0.6))
    scene.expect("running it again finishes it", scene.controller("delete_records", pick=0, fraction=0.6) == 0)
    rows = checker_reads.read_current(f"{scene.root}/control/record_deletions")
    scene.expect(f"the log start is recorded in the control plane ({len(rows)} rows)", len(rows) >= 1)
    scene.expect("a tick after it", scene.controller("tick", delay=0.0) == 0)
    scene.expect("producing after it", scene.produce("p2") == 0)
    scene.expect("the group reads the rest, reporting what was deleted", scene.member("g", "g-b") == 0)


def scenario_compact(scene: Scene) -> None:
    """A compaction dies with its merged files written, not committed: nothing changes, and the next
    compaction merges them."""
    scene.create(partitions=2)
    scene.produce("p0", batch=20)
    crashed(scene, scene.controller("compact", crash=scene.point))
    scene.expect("compacting again", scene.controller("compact") == 0)
    done = [e for e in scene.events("compact-1") if e.get("event") == "compacted"]
    scene.expect(f"the second compaction merged files ({done})", bool(done and done[0]["results"]))
    scene.expect("producing after it", scene.produce("p1") == 0)
    scene.expect("a group reads it all", scene.member("g", "g-a") == 0)


def scenario_compaction(scene: Scene) -> None:
    """A key compaction dies before its commit (nothing changed) or after it (``key_compactions``
    not told); running it again finishes it, and the checker's rules for a compacted topic hold
    (every key's latest record kept)."""
    scene.create(partitions=2, configs=["cleanup.policy=compact", "min.compaction.lag.ms=0",
                                         "min.cleanable.dirty.ratio=0.01"])
    scene.produce("p0")
    crashed(scene, scene.controller("compact_keys", crash=scene.point))
    scene.expect("compacting again", scene.controller("compact_keys") == 0)
    rows = checker_reads.read_current(f"{scene.root}/control/key_compactions")
    scene.expect(f"both partitions' cleanings recorded ({len(rows)} rows)", {r["partition"] for r in rows} == {0, 1})
    scene.expect("producing after it", scene.produce("p1") == 0)
    scene.expect("a group reads it all", scene.member("g", "g-a") == 0)


def roots_agree(scene: Scene, other: str) -> list[tuple]:
    """Expect the topic's log at the scene's root and at ``other`` to hold the same records (read
    with delta-rs); return them."""
    rows = [sorted(tuple(d.values()) for d in DeltaTable(str(Path(r) / "topics" / TOPIC)).to_pyarrow_table(
        columns=["partition", "offset", "sequence"]).to_pylist()) for r in (scene.root, other)]
    scene.expect(f"both roots hold the same records ({len(rows[0])} and {len(rows[1])})", rows[0] == rows[1])
    return rows[0]


def scenario_elect(scene: Scene) -> None:
    """A failover killed at the point is finished by the next command on the topic (here the
    election run again); the producer and the group follow the topic to the new leader, and both
    roots hold the same records once replicated."""
    us = str(scene.dir / "us")
    scene.create(partitions=3, replicas=[scene.root, us])
    scene.produce("p0")
    scene.controller("replicate")
    crashed(scene, scene.controller("elect", crash=scene.point, leader=us))
    scene.expect("re-running the election must finish it", scene.controller("elect", leader=us) == 0)
    scene.expect("producing after it", scene.produce("p1") == 0)
    scene.expect("replicating after it", scene.controller("replicate") == 0)
    scene.expect("a consumer reads it all", scene.member("g", "g-a") == 0)
    roots_agree(scene, us)


def scenario_replicate(scene: Scene) -> None:
    """A replicator killed at the point (copying, or truncating a returning leader that took
    records nobody copied before it was cut off) and run again copies nothing twice and skips
    nothing: both roots end with the same records."""
    us = str(scene.dir / "us")
    scene.create(partitions=3, replicas=[scene.root, us])
    scene.produce("p0")
    scene.controller("replicate")
    log = Path(scene.root) / "topics" / TOPIC
    if scene.point == "replicate:after_truncate":
        scene.controller("diverge", at=scene.root, records=30)
        log.rename(log.with_name(TOPIC + ".away"))  # cut off during the election
        scene.expect("the election without the old leader", scene.controller("elect", leader=us) == 0)
        log.with_name(TOPIC + ".away").rename(log)
    scene.expect("producing", scene.produce("p1") == 0)
    crashed(scene, scene.controller("replicate", crash=scene.point))
    scene.expect("re-running replicate must finish it", scene.controller("replicate") == 0)
    scene.expect("a consumer reads it all", scene.member("g", "g-a") == 0)
    scene.expect("every produced record is there once", len(roots_agree(scene, us)) == 400)


def scenario_layout(scene: Scene) -> None:
    """A move to the arrival layout killed before its commit changed nothing: producing goes on,
    the move run again moves every record, and a group reads them all once."""
    scene.create(partitions=3)
    scene.produce("p0")
    crashed(scene, scene.controller("layout", crash=scene.point, layout="arrival"))
    scene.expect("producing after it", scene.produce("p1") == 0)
    scene.expect("re-running the move must finish it", scene.controller("layout", layout="arrival") == 0)
    scene.expect("a consumer reads it all", scene.member("g", "g-a") == 0)


def scenario_txn(scene: Scene) -> None:
    """A read-process-write group (``actors.txn_copy``) killed at a transaction's crash point and
    started again: read_committed readers of both outputs get every input record exactly once,
    and the group's positions stand at the input's end."""
    from chaos.checker_reads import log_location, read_log_changes
    from chaos.checker_txn import open_firsts, output_problems
    from control_plane.group.offsets import GroupOffsets
    from control_plane.topics import TopicAdmin
    from log_store.session import LazySession
    from pipelines.consumer import ArrowHandler, Consumer
    from pipelines.settings import ConsumerSettings

    spark = LazySession(lambda: None)  # delta-rs reads on the local root: no session started
    scene.create(partitions=2)
    scene.produce("p0", n=40)
    outputs = [f"{TOPIC}-out0", f"{TOPIC}-out1"]
    admin = TopicAdmin(spark, scene.root)
    for topic in outputs:
        admin.create(topic, 2)
    args = {"transactional_id": "copier", "group": "copier", "outputs": outputs, "batch": 7}
    crashed(scene, scene.actor("copier", "txn_copy", args, crash=f"{scene.point}@2"))
    scene.expect("the copier run again must finish", scene.actor("copier", "txn_copy", args) == 0)
    expected = sorted(f"p0:{i}" for i in range(40))
    for i, topic in enumerate(outputs):
        got: list[dict] = []
        reader = Consumer(spark, scene.root, topic, "check", ConsumerSettings(isolation_level="read_committed"))
        reader.run(ArrowHandler(lambda batch, _r: got.extend(batch.to_pylist())))
        scene.expect(f"{topic}: each input record once, committed",
                     sorted(r["value"].decode().removesuffix(f"-{i}") for r in got) == expected)
        # judged again from the log's rows by the independent checker (delta-rs, no lakelog reader)
        location = log_location(scene.root, topic)
        log = read_log_changes(location)
        problems = output_problems(log, open_firsts(location, log), expected, f"-{i}",
                                   [(r["partition"], r["offset"]) for r in got])
        scene.expect(f"{topic}, as the checker reads it: {'; '.join(problems) or 'each committed transaction whole'}",
                     not problems)
    scene.expect("the group at the input's end",
                 GroupOffsets(spark, scene.root).committed("copier", TOPIC) == admin.log(TOPIC).log_end_offsets())


SCENARIOS: dict[str, Callable[[Scene], None]] = {
    "layout": scenario_layout,
    "create": scenario_create, "produce": scenario_produce, "consume": scenario_consume, "group": scenario_group,
    "alter": scenario_alter, "retire": scenario_retire, "delete": scenario_delete, "spark_sink": scenario_spark_sink,
    "retention": scenario_retention, "compact": scenario_compact, "compaction": scenario_compaction,
    "elect": scenario_elect,
    "replicate": scenario_replicate, "txn": scenario_txn,
}


def run_point(point: str, workdir: Path, gateway: str) -> Scene:
    scene = Scene(point=point, dir=workdir / point.replace(":", "-"), gateway=gateway)
    shutil.rmtree(scene.dir, ignore_errors=True)
    scene.dir.mkdir(parents=True)
    SCENARIOS[point.split(":")[0]](scene)
    scene.check()
    return scene


def run_all(workdir: Path, points: list[str] | None = None, verbose: bool = False) -> int:
    from rich.console import Console
    from rich.table import Table

    from chaos.__main__ import Host

    host = Host()
    table = Table(title="crash points: die there, recover, check")
    for col in ("crash point", "what is left half done", "result", "seconds"):
        table.add_column(col)
    failed = 0
    try:
        for point in points or list(POINTS):
            started = time.monotonic()
            scene = run_point(point, workdir, host.ensure())
            ok = not scene.problems
            failed += not ok
            table.add_row(point, POINTS[point], "ok" if ok else "FAILED: " + "; ".join(scene.problems)[:300],
                          f"{time.monotonic() - started:.0f}")
            if verbose or not ok:
                Console(stderr=True).print(f"{point}: {'ok' if ok else scene.problems}", highlight=False, markup=False)
            if ok:
                shutil.rmtree(scene.dir, ignore_errors=True)
    finally:
        host.stop()
    Console().print(table)
    return 1 if failed else 0
