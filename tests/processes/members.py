"""Group members as OS processes (``group_workers.py``), and waiting for a group to settle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from control_plane.group.describe import describe_group
from control_plane.group.store import GroupTables
from pipelines.producer import Producer
from tests.support import PROJECT, make_records

T = "t"


class Member:
    """A member process and the JSON lines it printed."""

    def __init__(self, root: str, group: str, member_id: str, protocol: str, assignor: str, tmp: Path, topic: str = T,
                 warmup: bool = False, batch: int = 50, env: dict | None = None) -> None:
        self.member_id = member_id
        self.stop_file = tmp / f"stop-{member_id}"
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "tests" / "processes" / "group_workers.py"), root, topic, group, member_id, protocol,
             assignor, str(tmp / f"sink-{group}"), str(self.stop_file), str(batch), "1" if warmup else "0"],
            stdout=subprocess.PIPE, stderr=open(tmp / f"stderr-{member_id}.log", "w"), text=True, cwd=PROJECT,
            env={**os.environ, **(env or {})},
        )
        self.stderr_path = tmp / f"stderr-{member_id}.log"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def stop(self) -> None:
        self.stop_file.write_text("stop")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout: float = 120) -> None:
        self.stop()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        assert self.proc.returncode in (0, -9), self.stderr_path.read_text()[-3000:]


def wait_stable(spark, root: str, group: str, members: set[str], timeout: float = 480, owned: int | None = None):
    """Until the group's latest generation is exactly ``members`` and every one adopted it (and,
    with ``owned``, that many partitions have an owner: a cooperative rebalance that withheld
    partitions is not over before its follow-up)."""
    deadline = time.time() + timeout
    tables = GroupTables(spark, root)
    while time.time() < deadline:
        gen = tables.generation(group)
        if gen and gen.member_ids() == members and (owned is None or len(gen.owner()) == owned):
            beats = tables.member_states(group)
            if all(m in beats and beats[m].generation == gen.generation and beats[m].joining is None for m in members):
                return gen
        time.sleep(0.5)
    d = describe_group(tables, group)
    logs = "".join(f"\n--- {p.name}:\n{p.read_text()[-1500:]}" for p in sorted(Path(root).parent.glob("stderr-*.log")))
    raise AssertionError(f"group {group} did not settle on {sorted(members)}: {d.model_dump_json()}{logs}")


def produce(spark, root: str, start: int, n: int, topic: str = T) -> None:
    Producer(spark, root, topic, "test-producer").send(make_records(spark, n, keys=20, start=start))


def sink_rows(spark, tmp: Path, group: str):
    return spark.read.format("delta").load(str(tmp / f"sink-{group}"))
