"""A Kafka producer producing keyed records without pause through `lakelog serve` while the topic
grows 4 -> 6 and shrinks 6 -> 5, and a group of two Java consumers (classic protocol,
cooperative-sticky) reading it: every key's records reach the group in the order the log holds
them, which is the order produced unless the producer moved the key to another of its
per-partition streams and the new stream's request reached the server first (Kafka's producers
order each stream on their own: docs/serve.md, "Placement"), none lost, because the server places keyed records under the count it commits with (serve/placement.py)
and holds a group's fetches to lakelog's resize gates (serve/gates.py, docs/serve.md "Consumer
groups across a resize"). The consumers are stopped (SIGSTOP) across the grow, so they resume with
a backlog of pre- and post-grow records on every partition: without the gates their fetches run
ahead of the barrier (``LAKELOG_UNSAFE_DISABLE_GATING`` shows the check failing).

The producer is any process that prints Kafka's ``VerifiableProducer`` JSON lines (the Java tool
itself, or tests/serve/rdkafka_producer.py for librdkafka): value ``n`` is the ``n``-th record
produced, its key ``n % KEYS``.

The order of deliveries across the two consumer processes is the order this module reads their
lines, through one selector: a consumer prints a record before it commits it, the gate opens only
on the group's committed offsets, and only then can the other consumer fetch, print and be read."""

from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.settings import ControllerSettings
from pipelines.audit.run import run_audit
from tests.serve.conftest import bootstrap
from tests.serve.kafka_tools import kafka
from tests.support import log_rows

KEYS = 24


def java(*options: str) -> list[str]:
    """The start of a command running a class of Kafka's jars (or a Java source file) with a small heap."""
    from benchmarks.kafka_broker import java_command

    return java_command("256m", "-XX:TieredStopAtLevel=1", *options)


class Events:
    """JSON lines of several tools, in the order one selector reads them."""

    def __init__(self, folder) -> None:
        self.folder = folder
        self.lines: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen] = {}
        self._java: set[str] = set()
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def start(self, name: str, tool: str, *args: str) -> subprocess.Popen:
        """Run a class of Kafka's jars. The consumers' group decisions (joins, assignments, revokes)
        and every tool's warnings and errors, with stack traces, go to NAME.err: VerifiableConsumer
        logs, never prints, why it stopped."""
        self._java.add(name)
        return self.spawn(name, [*java("-Dkafka.group.log=info"), tool, *args])

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Run any command whose standard output is JSON lines; its standard error goes to NAME.err."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(self.folder / f"{name}.err", "wb"),
                                env=None if env is None else {**os.environ, **env})
        os.set_blocking(proc.stdout.fileno(), False)
        self.procs[name] = proc
        self._sel.register(proc.stdout, selectors.EVENT_READ, [name, b""])
        return proc

    def _read(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.05) if self._sel.get_map() else []:
                data = os.read(key.fd, 65536)
                if not data:
                    self._sel.unregister(key.fileobj)
                    continue
                buf = key.data[1] + data
                *whole, key.data[1] = buf.split(b"\n")
                with self.lock:
                    self.lines.extend((key.data[0], json.loads(w)) for w in whole if w.startswith(b"{"))
            if not self._sel.get_map():
                time.sleep(0.05)

    def named(self, event: str, who: str | None = None) -> list[tuple[str, dict]]:
        with self.lock:
            return [(n, e) for n, e in self.lines if e.get("name") == event and who in (None, n)]

    def wait(self, what, timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, f"timed out: {why}; {self.summary()}"
            time.sleep(0.1)

    def summary(self) -> str:
        with self.lock:
            counts: dict[tuple[str, str], int] = {}
            for n, e in self.lines:
                counts[(n, e.get("name"))] = counts.get((n, e.get("name")), 0) + 1
            last = self.lines[-3:]
        errs = {n: _said((self.folder / f"{n}.err").read_text(errors="replace")) for n in self.procs}
        reached: dict[tuple[str, int], int] = {}
        for n, e in self.named("record_data"):
            reached[(n, e["partition"])] = max(reached.get((n, e["partition"]), -1), e["offset"])
        gating = self.folder / "gating.log"
        decisions = gating.read_text()[-3000:] if gating.exists() else ""
        stacks = ""
        producer = self.procs.get("producer")
        if producer is not None and producer.poll() is None and "producer" in self._java:
            dump = subprocess.run(["jcmd", str(producer.pid), "Thread.print"], capture_output=True, text=True).stdout
            stacks = "\n".join(b[:1500] for b in dump.split("\n\n") if '"main"' in b or "kafka-producer" in b)
        served = self.folder / "serve.log"
        return (f"producer threads {stacks}; server log {served.read_text()[-3000:] if served.exists() else ''}; "
                f"events {counts}; last {last}; delivered up to {sorted(reached.items())}; "
                f"held {assigned(self)}; stderr {errs}; gate decisions {decisions}")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._stop.set()
        self._thread.join(10)


def _said(log: str) -> str:
    """What a tool's log says that a failure's message needs: each error with its stack trace, then
    the last of its other lines."""
    lines = log.splitlines()
    errors = []
    for i, line in enumerate(lines):
        if " ERROR " in line:
            trace = [t for t in lines[i + 1:i + 40] if t.startswith(("\t", "Caused by", "org.", "java."))]
            errors.append("\n".join([line, *trace[:25]]))
    return "\n".join(errors[-3:] + ["..."] + lines[-12:])


def died_of_the_clients_position_race(events: Events, name: str) -> bool:
    """Whether consumer ``name`` ended on Kafka 4.4's AsyncKafkaConsumer race: FetchCollector sets
    the next position of a partition whose position the background thread has just made
    await validation (a metadata update with a new leader epoch); the client throws
    IllegalStateException from poll and VerifiableConsumer exits. A client's defect, not the server's."""
    said = (events.folder / f"{name}.err").read_text(errors="replace")
    return ("Cannot set a new position without a valid current position" in said
            and "FetchCollector.fetchRecords" in said)


def out_of_order(deliveries: list[tuple[str, int, int, int]]) -> list[tuple]:
    """(key, value) of every first delivery that came before an earlier-produced record of its
    key was delivered (``deliveries``: consumer, partition, offset, value, in delivery order)."""
    seen: set[int] = set()
    bad = []
    for _who, _p, _o, value in deliveries:
        if value in seen:
            continue  # a redelivery (at-least-once: a partition moved before its commit)
        seen.add(value)
        if any(v not in seen for v in range(value % KEYS, value, KEYS)):
            bad.append((value % KEYS, value))
    return bad


def in_log_order(rows: list[dict]) -> dict[tuple[int, int], list[int]]:
    """Each (partition, key)'s values in offset order, as the log holds them."""
    placed: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r in rows:
        placed.setdefault((r["partition"], int(r["value"]) % KEYS), []).append((r["offset"], int(r["value"])))
    return {at: [v for _o, v in sorted(records)] for at, records in placed.items()}


def moved_and_reversed(rows: list[dict], acks: list[dict]) -> set[int]:
    """The values the log holds ahead of an earlier-produced record of their key in the same
    partition, each such earlier record addressed by the producer to another partition: a key the
    client moved to another of its per-partition sequence streams, whose new stream's request
    reached the server first (docs/serve.md, "Placement", what Kafka's producers do not keep). A
    value behind an earlier one of its own stream is not among them: that order is the server's."""
    addressed = {int(a["value"]): a["partition"] for a in acks}
    placed: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r in rows:
        value = int(r["value"])
        placed.setdefault((r["partition"], value % KEYS), []).append((r["offset"], value))
    moved = set()
    for run in placed.values():
        run.sort()
        for i, (_o, value) in enumerate(run):
            earlier_after = [u for _p, u in run[i + 1:] if u < value]
            if earlier_after and all(addressed[u] != addressed[value] for u in earlier_after):
                moved.add(value)
    return moved


def assigned(events: Events) -> set[int]:
    """The partitions the consumers hold now, from their rebalance events."""
    held: dict[str, set[int]] = {}
    with events.lock:
        lines = list(events.lines)
    for who, e in lines:
        parts = {p["partition"] for p in e.get("partitions", [])}
        if e.get("name") == "partitions_assigned":
            held[who] = held.get(who, set()) | parts
        elif e.get("name") == "partitions_revoked":
            held[who] = held.get(who, set()) - parts
    return set().union(*held.values()) if held else set()


@dataclass
class Run:
    """What a run left for a test's own checks: the producer's acknowledgements
    (``producer_send_success`` events, in the order read: the first ``before_grow`` of them, and the
    first ``before_shrink``, were read before that resize was asked for, so their records were
    committed under the count before it; those from ``after_shrink`` on were read once the shrink
    was committed) and the log as delta-rs read it."""

    acks: list[dict]
    before_grow: int
    before_shrink: int
    after_shrink: int
    rows: list[dict]
    moved: set[int]  # records the log holds ahead of an earlier one of their key (``moved_and_reversed``)


StartProducer = Callable[[Events, str, str], subprocess.Popen]
"""Starts the process named ``producer`` in ``events``: (events, bootstrap, topic) -> its process.
It produces ``str(n % KEYS)``, ``str(n)`` for n = 0, 1, ... at about 100 records a second, prints
VerifiableProducer's events, and on SIGTERM flushes, prints ``shutdown_complete`` and ends."""


# VerifiableConsumer's options for each group protocol: Kafka's classic one with the
# cooperative-sticky assignor, and KIP-848's with the server's uniform assignor
PROTOCOLS = {
    "classic": ["--assignment-strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"],
    "consumer": ["--group-protocol", "consumer", "--group-remote-assignor", "uniform"],
}


def across_a_grow_and_a_shrink(spark, served, root, tmp_path, start_producer: StartProducer,
                               protocol: str = "classic") -> Run:
    """The scenario of this module's docstring, with every check of order, loss, duplicates, the
    audit, the group's offsets and the shrunk partition's retirement, the group on ``protocol``
    (a key of ``PROTOCOLS``); returns what it saw."""
    boot = bootstrap(served)
    served.ctx.admin.create("orders", 4)
    config = tmp_path / "consumer.properties"
    # auto-commit: each poll commits what the last one delivered, on every assigned partition
    config.write_text("metadata.max.age.ms=1000\nmax.poll.records=50\nauto.commit.interval.ms=100\n")
    events = Events(tmp_path)
    decisions = logging.FileHandler(tmp_path / "gating.log")  # the gates' decisions, for a failure's message
    logging.getLogger("lakelog.gating").addHandler(decisions)
    logging.getLogger("lakelog.gating").setLevel(logging.DEBUG)
    served_log = logging.FileHandler(tmp_path / "serve.log")
    logging.getLogger("lakelog.serve").addHandler(served_log)
    try:
        for name in ("c1", "c2"):
            events.start(name, "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", boot,
                         "--topic", "orders", "--group-id", "g", "--verbose", "--reset-policy", "earliest",
                         "--enable-autocommit", *PROTOCOLS[protocol], "--command-config", str(config))
        events.wait(lambda: {n for n, _ in events.named("partitions_assigned")} == {"c1", "c2"}, 120,
                    "both consumers assigned")
        producer = start_producer(events, boot, "orders")
        acked = lambda: len(events.named("producer_send_success"))  # noqa: E731
        events.wait(lambda: acked() >= 300 and len(events.named("record_data")) >= 150, 120, "first records")

        consumers = [events.procs["c1"], events.procs["c2"]]
        for c in consumers:  # a backlog across the grow: pre- and post-grow records on every partition
            c.send_signal(signal.SIGSTOP)
        before_grow = acked()
        kafka("topics", "--bootstrap-server", boot, "--alter", "--topic", "orders", "--partitions", "6")
        at_grow = acked()
        events.wait(lambda: acked() >= at_grow + 300, 120, "records after the grow")
        for c in consumers:
            c.send_signal(signal.SIGCONT)

        events.wait(lambda: acked() >= at_grow + 500, 120, "records before the shrink")
        controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
        before_shrink = acked()
        controller.alter("orders", 5)  # partition 5 is marked: the group drains it, then it is retired
        at_shrink = acked()
        events.wait(lambda: acked() >= at_shrink + 300, 120, "records after the shrink")
        producer.send_signal(signal.SIGTERM)
        events.wait(lambda: events.named("shutdown_complete", "producer"), 120, "the producer flushed")
        assert events.named("producer_send_error") == []
        acks = [e for _n, e in events.named("producer_send_success")]
        sent = sorted(int(e["value"]) for e in acks)
        assert sent == list(range(len(sent)))

        # the log, read by delta-rs: each record once, none lost, each key's records placed by its hash
        rows = log_rows(root, "orders")
        assert sorted(int(r["value"]) for r in rows) == sent
        assert {r["partition"] for r in rows} == set(range(6))

        def delivered() -> list[tuple[str, int, int, int]]:
            return [(n, e["partition"], e["offset"], int(e["value"])) for n, e in events.named("record_data")]

        events.wait(lambda: {v for *_x, v in delivered()} >= set(sent), 180, "every record delivered")
        deliveries = delivered()
        # each key in the order produced, but where the producer moved the key to another of its
        # sequence streams and the new stream's request came first: the group reads the log's order
        moved = moved_and_reversed(rows, acks)
        assert {v for _k, v in out_of_order(deliveries)} <= moved, (out_of_order(deliveries), moved)
        by: dict[int, set[str]] = {}  # key -> consumers that delivered it: the order check spans processes
        for who, _p, _o, v in deliveries:
            by.setdefault(v % KEYS, set()).add(who)
        assert any(len(w) == 2 for w in by.values()), "no key changed consumers: the check proves nothing"

        # the shrink's partition, drained by the group, retires and leaves its assignment
        assert controller.tick("orders")[0].retired == [5]
        events.wait(lambda: assigned(events) == set(range(5)), 120, "partition 5 left the group's assignment")
        # both consumers still in the group (a leader's assignor that fails ends its consumer's poll loop),
        # but for Kafka's own client race: its KIP-848 consumer's application thread may set a position
        # its background thread has just invalidated for a new leader epoch (which every resize bumps)
        gone = [c for c in ("c1", "c2") if events.procs[c].poll() is not None]
        assert [c for c in gone if not died_of_the_clients_position_race(events, c)] == [], events.summary()

        assert run_audit(spark, root, "orders").passed
        ours = GroupOffsets(spark, root).committed("g", "orders")
        ends = {p: max(r["offset"] for r in rows if r["partition"] == p) + 1 for p in range(6)}
        assert ours == ends
        described = subprocess.run([*java(), "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                                    "--bootstrap-server", boot, "--describe", "--group", "g",
                                    "--timeout", "60000"],  # the tool waits 5 s by default: a loaded server
                                   capture_output=True, text=True, timeout=120)
        theirs = {}
        for line in described.stdout.splitlines():
            cols = line.split()
            if cols and cols[0] == "g":
                theirs[int(cols[2])] = int(cols[3])
        assert theirs == {p: o for p, o in ours.items() if p < 5}, (described.stdout, described.stderr[-3000:])
        return Run(acks=acks, before_grow=before_grow, before_shrink=before_shrink, after_shrink=at_shrink, rows=rows,
                   moved=moved)
    finally:
        events.close()
        logging.getLogger("lakelog.gating").removeHandler(decisions)
        logging.getLogger("lakelog.gating").setLevel(logging.NOTSET)
        logging.getLogger("lakelog.serve").removeHandler(served_log)
