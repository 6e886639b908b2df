"""``lakelog produce`` and ``lakelog consume`` through a lost leader root, as docs/replication.md
promises: they wait (a producer backs off and retries, a group member skips its turn) until an
election (or, for a topic with one root, the root's return), then go on with every record once
and in order; past their timeouts they fail with one line naming the root and what to do.

Each kind of loss (``lost_roots.KINDS``): the root missing, a file in its place, an empty mount
point, a mode that refuses access. The commands are OS processes (``lost_roots.Command``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.processes.lost_roots import AS_A_USER, KINDS, Command, Host, kind_param, lose
from tests.support import pausing_at, resume, while_paused

TOPIC = "orders"
PATIENT = {"producer": {"acks": "all", "batch_size": 10, "max_retries": 2},  # (max_retries: conflicts only)
           "consumer": {"max_records_per_batch": 1000}}
IMPATIENT = {"producer": {"acks": "all", "delivery_timeout_ms": 3000}, "consumer": {"leader_wait_timeout_ms": 3000}}


@pytest.fixture(scope="module")
def user_host():
    host = Host()
    yield host
    host.close()


@pytest.fixture()
def jvm(request, kind):
    """(gateway, as a user) for ``kind``: a mode refuses only a process without the superuser's
    capabilities (``lost_roots.AS_A_USER``), whose JVM must be one too; the others use the test run's."""
    if kind == "refusing_access" and AS_A_USER:
        return request.getfixturevalue("user_host").gateway, True
    from chaos.host import GATEWAY_ENV

    request.getfixturevalue("spark")
    return os.environ[GATEWAY_ENV], False


class Scene:
    """A metadata root and two replica roots (/eu leading), and the commands run against them."""

    def __init__(self, jvm: tuple[str, bool], tmp: Path) -> None:
        (self.gateway, self.as_a_user), self.tmp = jvm, tmp
        self.meta, self.eu, self.us = tmp / "meta", tmp / "eu", tmp / "us"
        self.eu.mkdir()
        self.confs = {name: tmp / f"{name}.yaml" for name in ("patient", "impatient")}
        for name, settings in (("patient", PATIENT), ("impatient", IMPATIENT)):
            self.confs[name].write_text(json.dumps({"root": str(self.meta), **settings}))  # (JSON is YAML)
        self.back = None

    def lakelog(self, name: str, *args: str, conf: str = "patient", env: dict[str, str] | None = None) -> Command:
        return Command(self.gateway, ["--conf", str(self.confs[conf]), *args], self.tmp / f"{name}.err", env,
                       self.as_a_user)

    def run(self, *args: str) -> None:
        cmd = self.lakelog(f"{args[0]}-{time.monotonic_ns()}", *args)
        assert cmd.wait() == 0, cmd.stderr()[-3000:]

    def records(self, producer_id: str, n: int) -> str:
        """An input file of ``n`` keyed records, valued ``producer_id:line``."""
        path = self.tmp / f"{producer_id}.jsonl"
        path.write_text("".join(json.dumps({"key": f"k{i % 7}", "value": f"{producer_id}:{i}"}) + "\n" for i in range(n)))
        return str(path)

    def produce(self, producer_id: str, n: int, topic: str = TOPIC, **kw) -> Command:
        return self.lakelog(producer_id, "produce", "--topic", topic, "--input", self.records(producer_id, n),
                            "--producer-id", producer_id, **kw)

    def member(self, group: str, records: int | None = None, sink: bool = True, topic: str = TOPIC, *more: str,
               **kw) -> Command:
        """A member of ``group`` into its sink (or to the terminal), until it delivered ``records``."""
        args = ["consume", "--topic", topic, "--group", group, "--idle-timeout", "600",
                "--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500", *more]
        if sink:
            args += ["--output", str(self.sink(group))]
        if records:
            args += ["--max-records", str(records)]
        return self.lakelog(f"member-{group}", *args, **kw)

    def sink(self, group: str) -> Path:
        return self.tmp / f"sink-{group}"

    def sink_rows(self, group: str) -> int:
        try:
            return len(DeltaTable(str(self.sink(group))).to_pyarrow_table(columns=["offset"]))
        except Exception:  # not made yet, or being made
            return 0

    def lose(self, root: Path, kind: str) -> None:
        self.back = lose(root, kind)

    def restore(self) -> None:
        if self.back is not None:
            self.back()
            self.back = None


def _wait_for(what: str, test, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _each_once_in_order(rows: list[dict], produced: dict[str, int]) -> None:
    """Every record of each producer once; per partition, offsets dense from 0 in the order given
    (delivered, or of the log) and each producer's sequences rising with them (its order kept)."""
    seen = sorted((r["producer_id"], r["sequence"]) for r in rows)
    assert seen == sorted((p, s) for p, n in produced.items() for s in range(n)), seen
    for partition in {r["partition"] for r in rows}:
        mine = [r for r in rows if r["partition"] == partition]
        assert [r["offset"] for r in mine] == list(range(len(mine))), (partition, [r["offset"] for r in mine])
        for pid in produced:
            sequences = [r["sequence"] for r in mine if r["producer_id"] == pid]
            assert sequences == sorted(sequences), (partition, pid, sequences)


def _log(root: Path, topic: str = TOPIC) -> list[dict]:
    rows = DeltaTable(str(root / "topics" / topic)).to_pyarrow_table(
        columns=["partition", "offset", "producer_id", "sequence"]).to_pylist()
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def _sink(sink: Path) -> list[dict]:
    """A sink's rows in the order they were committed (the change feed's commit versions)."""
    changes = pa.table(DeltaTable(str(sink)).load_cdf(starting_version=0).read_all()).to_pylist()
    return sorted((r for r in changes if r["_change_type"] == "insert"), key=lambda r: (r["_commit_version"], r["offset"]))


def _printed(cmd: Command) -> list[dict]:
    """The records a terminal consumer printed (``Partition:P  Offset:O  key  producer:sequence``), in order."""
    rows = []
    for line in cmd.stdout().splitlines():
        partition, offset, _key, value = line.split("\t")
        pid, sequence = value.split(":")
        rows.append({"partition": int(partition.split(":")[1]), "offset": int(offset.split(":")[1]),
                     "producer_id": pid, "sequence": int(sequence)})
    return rows


def _fails_after_its_timeout_in_one_line(cmd: Command, *said: str) -> None:
    assert cmd.wait(timeout=90) == 1, cmd.stderr()[-3000:]
    assert time.monotonic() - cmd.started > 3, "it exited before its timeout"
    lines = cmd.errors()
    assert len(lines) == 1 and "for 3 s (" in lines[0], cmd.stderr()[-3000:]
    for words in said:
        assert words in lines[0], (words, lines[0])


# About 35-80 s each: the finding's kind (a file where the root's folder was) in the default suite, an unmounted
# root long, the others slow (the unit tests of lost roots cover how each kind is told apart).
SUITE_OF_KIND = {"not_a_directory": [], "unmounted": [pytest.mark.long]}


@pytest.mark.parametrize("kind", [kind_param(k, *SUITE_OF_KIND.get(k, [pytest.mark.slow])) for k in KINDS])
def test_producers_and_consumers_wait_out_a_lost_leader_root_until_an_election(jvm, tmp_path, kind):
    """/eu lost while a producer has written its second batch's files and a group member has
    delivered the first records; another producer and another group's member (to the terminal)
    start while it is lost. They wait; ones with 3 s timeouts (a producer, a group member, a
    standalone consumer) exit 1 after them, naming /eu and the election of /us. /us is elected:
    every batch lands there once, each member delivers every record once and in order."""
    scene = Scene(jvm, tmp_path)
    try:
        scene.run("topics", "create", "--topic", TOPIC, "--partitions", "2", "--replicas", f"{scene.eu},{scene.us}")
        scene.run("produce", "--topic", TOPIC, "--input", scene.records("p0", 20), "--producer-id", "p0")
        produced = {"p0": 20, "p1": 20, "p2": 10}
        total = sum(produced.values())
        running = scene.member("g", total)
        _wait_for("the member's first records", lambda: scene.sink_rows("g") >= 20 or not running.running())
        assert running.running(), running.stderr()[-3000:]
        writing = scene.produce("p1", 20, env=pausing_at(tmp_path, "produce:after_write@2"))
        assert while_paused(writing.proc, tmp_path, "produce:after_write@2", timeout=120), writing.stderr()[-3000:]
        scene.lose(scene.eu, kind)
        resume(tmp_path, "produce:after_write@2")
        waiting = [writing, running, scene.produce("p2", 10), scene.member("h", total, sink=False)]
        impatient = [scene.produce("p3", 5, conf="impatient"), scene.member("i", conf="impatient"),
                     scene.member("j", None, True, TOPIC, "--standalone", conf="impatient")]
        election = f"elect an in-sync root (lakelog topics elect-leader --topic {TOPIC} --leader {scene.us})"
        for cmd in impatient:
            _fails_after_its_timeout_in_one_line(cmd, f"LeaderNotAvailableError: the leader root {scene.eu} of "
                                                      f"'{TOPIC}' could not be reached", election)
        for cmd in waiting:
            assert cmd.running(), cmd.stderr()[-3000:]
        scene.run("topics", "elect-leader", "--topic", TOPIC, "--leader", str(scene.us))
        for cmd in waiting:
            assert cmd.wait() == 0, cmd.stderr()[-3000:]
        _each_once_in_order(_log(scene.us), produced)
        _each_once_in_order(_sink(scene.sink("g")), produced)
        _each_once_in_order(_printed(waiting[-1]), produced)
    finally:
        scene.restore()


@pytest.mark.parametrize("kind", [kind_param("unmounted")])
def test_a_topic_with_one_root_waits_for_its_return(jvm, tmp_path, kind):
    """A topic without replicas has no election to wait for: its producers and consumers wait for
    its root's return (its log's folder an empty mount point here), up to their timeouts, as Kafka's
    clients wait for an offline partition; ones with 3 s timeouts exit 1 naming the log. The root
    back, the others finish: every record once, in order."""
    scene = Scene(jvm, tmp_path)
    topic = "plain"
    try:
        scene.run("topics", "create", "--topic", topic, "--partitions", "2")
        produced = {"p0": 20, "p1": 10}
        scene.run("produce", "--topic", topic, "--input", scene.records("p0", 20), "--producer-id", "p0")
        scene.lose(scene.meta / "topics" / topic, kind)
        waiting = [scene.produce("p1", 10, topic), scene.member("g", sum(produced.values()), True, topic)]
        impatient = [scene.produce("p2", 5, topic, conf="impatient"), scene.member("i", None, True, topic,
                                                                                  conf="impatient")]
        for cmd in impatient:
            _fails_after_its_timeout_in_one_line(cmd, f"StorageError: '{topic}' could not be read or written",
                                                 str(scene.meta / "topics" / topic), "bring its root back")
        for cmd in waiting:
            assert cmd.running(), cmd.stderr()[-3000:]
        scene.restore()
        for cmd in waiting:
            assert cmd.wait() == 0, cmd.stderr()[-3000:]
        _each_once_in_order(_log(scene.meta, topic), produced)
        _each_once_in_order(_sink(scene.sink("g")), produced)
    finally:
        scene.restore()
