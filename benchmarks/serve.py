"""``lakelog serve`` beside a Kafka 4.4 broker on the same machine, with Kafka's own tools.

    .venv/bin/python benchmarks/serve.py [--records 500000] [--partitions 16] [--cases all|aims|consume] [--json-out FILE]
                                         [--before CHECKOUT]

One after another (only one of them uses the machine at a time):

1. Kafka's ProducerPerformance then ConsumerPerformance, 500k records of 120 bytes into 16
   partitions, acks 1 and acks all, against the broker and against ``lakelog serve`` (its own
   process and JVM, a fresh root); against the server also with producer settings made for a
   broker whose answers take a commit (batch.size 1 MiB, linger.ms 50), as object-store Kafkas
   advise;
2. produce latency at a steady rate (ProducerPerformance --throughput), p50 and p99;
3. end-to-end latency (Kafka's EndToEndLatency: a record produced, then consumed), p50 and p99;
4. 1, 8 and 32 concurrent producers (librdkafka, one process): aggregate records a second and the
   topic's Delta commits a second;
5. the server's own cost over all of it: start to listening, CPU seconds of its Python and of its
   JVM (if it starts one), resident memory at the end;
6. with ``--before CHECKOUT`` (a worktree of an earlier commit), that checkout's server through
   steps 1-3 and 5 too, for a before/after column in the same run.

Prints each measurement as it is made, then one table with ratios (lakelog serve / Kafka); the
figures, machine and load go to ``--json-out`` (``benchmarks/out/serve-<time>.json``) after every
measurement, so a run stopped early keeps what it measured. BENCHMARKS.md keeps them.
``--cases consume`` runs only the first step's acks 1 produce and consume, against the broker, a
server keeping none of its commits in memory (``serve.tail_bytes`` 0) and one with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.kafka_broker import Broker, _java, create_topic, failure, measure  # noqa: E402

PRODUCERS = (1, 8, 32)  # concurrent librdkafka producers
OBJECT_STORE_PRODUCER = ["batch.size=1048576", "linger.ms=50", "buffer.memory=268435456", "max.request.size=16777216"]


class LakelogServer:
    """``lakelog serve`` in a process of its own over a fresh root."""

    def __init__(self, serve: dict | None = None, checkout: Path = HERE.parent) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        folder = tempfile.mkdtemp(prefix="lakelog-serve-bench-")
        self.root = folder + "/root"
        env = dict(os.environ)
        if serve:  # serve settings beside the default configuration's
            import yaml

            conf = yaml.safe_load((HERE.parent / "conf" / "local.yaml").read_text()) | {"serve": serve}
            env["LAKELOG_CONF"] = f"{folder}/conf.yaml"
            Path(env["LAKELOG_CONF"]).write_text(yaml.safe_dump(conf))
        env["PYTHONPATH"] = str(checkout)  # that checkout's code, whichever the virtualenv was made in
        began = time.monotonic()
        self.process = subprocess.Popen([sys.executable, "-m", "jobs.cli", "--root", self.root, "serve",
                                         "--listen", self.bootstrap, "--json"], stdout=subprocess.PIPE, text=True,
                                        env=env, cwd=checkout)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("lakelog serve did not start")
        self.start_s = round(time.monotonic() - began, 2)  # start to listening

    def usage(self) -> dict:
        """CPU seconds so far of the server's Python and of its JVM (a child, if it started one),
        and their resident memory now (MiB), from /proc."""
        tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick,
                                          int(fields[21]) * page / 2**20)
        tree, grew = {self.process.pid}, True
        while grew:
            found = {pid for pid, (ppid, _c, _r) in stats.items() if ppid in tree} - tree
            tree |= found
            grew = bool(found)
        python = stats.get(self.process.pid, (0, 0.0, 0.0))
        others = [stats[p] for p in tree - {self.process.pid} if p in stats]
        return {"start_s": self.start_s, "python_cpu_s": round(python[1], 1),
                "jvm_cpu_s": round(sum(c for _p, c, _r in others), 1),
                "rss_mib": round(python[2] + sum(r for _p, _c, r in others))}

    def commits(self, topic: str) -> int:
        """The topic log's Delta version: its commits so far."""
        from control_plane.layout import RootLayout
        from log_store import rs_reader

        return rs_reader.version(RootLayout(self.root).topic(topic))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(120)


def perf(bootstrap: str, records: int, partitions: int, acks: str, extra: list[str] = ()) -> dict:
    """Produce then consume on a new topic (with ``extra`` producer settings: produce only)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    return measure(bootstrap, records, 120, partitions, acks=acks, topic=topic, producer_props=extra,
                   consume=not extra) | {"topic": topic}


def steady(bootstrap: str, partitions: int, rate: int, seconds: int) -> dict:
    """Produce latency at ``rate`` records a second (acks 1)."""
    topic = f"steady-{uuid.uuid4().hex[:8]}"
    out = measure(bootstrap, rate * seconds, 120, partitions, acks="1", throughput=rate, topic=topic, consume=False)
    return {"rate": rate, "p50_ms": out["produce_p50_ms"], "p99_ms": out["produce_p99_ms"]}


def end_to_end(bootstrap: str, messages: int) -> dict:
    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    out = _java("org.apache.kafka.tools.EndToEndLatency", bootstrap, topic, str(messages), "1", "120", heap="512m")
    found = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+)", out.stdout + out.stderr)
    if not found:
        raise RuntimeError(f"EndToEndLatency: {failure(out)}")
    return {"messages": messages, "p50_ms": float(found.group(1)), "p99_ms": float(found.group(2))}


def concurrent(server: LakelogServer, producers: int, records: int, partitions: int) -> dict:
    """``producers`` librdkafka producers sharing ``records``: aggregate records a second and commits a second."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"conc-{producers}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(120)
    clients = [Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         "queue.buffering.max.messages": 2_000_000}) for _ in range(producers)]
    value = b"v" * 112
    before = server.commits(topic)

    def feed(client, count: int) -> None:
        for i in range(count):
            while True:
                try:
                    client.produce(topic, key=b"key-%04d" % (i % 1000), value=value)
                    break
                except BufferError:
                    client.poll(0.01)
            if i % 2000 == 0:
                client.poll(0)
        client.flush(600)

    started = time.perf_counter()
    threads = [threading.Thread(target=feed, args=(c, records // producers)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    commits = server.commits(topic) - before
    return {"producers": producers, "records": records, "rec_s": records / seconds, "commits_s": commits / seconds,
            "records_per_commit": records / max(commits, 1)}


def consume_only(n: int, parts: int, step, figures: dict, out: Path) -> None:
    """Produce then consume ``n`` records (acks 1) against the broker, then against a fresh server
    keeping no records of its commits (``serve.tail_bytes`` 0: every fetch reads the log's files),
    then against a fresh server with the default settings."""
    with Broker() as broker:
        step("kafka", "acks1", lambda: perf(broker.bootstrap, n, parts, "1"))
    for side, serve in (("lakelog_no_tail", {"tail_bytes": 0}), ("lakelog", None)):
        server = LakelogServer(serve)
        try:
            step(side, "acks1", lambda: perf(server.bootstrap, n, parts, "1"))
        finally:
            server.stop()
    figures["load_after"] = os.getloadavg()
    out.write_text(json.dumps(figures, indent=2))
    for side in ("lakelog_no_tail", "lakelog"):
        for key, what in (("consume_rec_s", "consume"), ("consume_fetch_rec_s", "consume after the group's join")):
            mine, theirs = figures[side]["acks1"].get(key), figures["kafka"]["acks1"].get(key)
            if mine and theirs:
                print(f"{side} {what}: {mine:,.0f} rec/s, Kafka 4.4 {theirs:,.0f} rec/s, ratio {mine / theirs:.2f}")
    print(f"figures: {out}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--cases", choices=["all", "aims", "consume"], default="all",
                        help="aims: only the cases the engine's aims name (no object-store settings, no concurrent producers)")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--before", default=None, help="another checkout (an earlier commit) whose server runs the "
                        "produce, steady and end-to-end cases too, in the same run, for a before/after column")
    args = parser.parse_args()
    n, parts = args.records, args.partitions
    figures: dict = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": os.getloadavg(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out = Path(args.json_out or HERE / "out" / f"serve-{int(time.time())}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def step(side: str, name: str, run) -> None:
        """One measurement, printed and written to ``out`` at once: a run stopped early keeps what it measured."""
        started = time.monotonic()
        figures.setdefault(side, {})[name] = run()
        print(f"{side} {name} ({time.monotonic() - started:.0f} s): {json.dumps(figures[side][name])}", flush=True)
        out.write_text(json.dumps(figures, indent=2))

    if args.cases == "consume":
        consume_only(n, parts, step, figures, out)
        return
    with Broker() as broker:
        b = broker.bootstrap
        step("kafka", "acks1", lambda: perf(b, n, parts, "1"))
        step("kafka", "acks_all", lambda: perf(b, n, parts, "all"))
        step("kafka", "steady", lambda: steady(b, parts, 5000, 10))
        step("kafka", "e2e", lambda: end_to_end(b, 500))
    server = LakelogServer()
    try:
        s = server.bootstrap
        step("lakelog", "acks1", lambda: perf(s, n, parts, "1"))
        step("lakelog", "acks_all", lambda: perf(s, n, parts, "all"))
        if args.cases == "all":
            step("lakelog", "acks1_object_store_settings", lambda: perf(s, n, parts, "1", OBJECT_STORE_PRODUCER))
        step("lakelog", "steady", lambda: steady(s, parts, 5000, 10))
        step("lakelog", "e2e", lambda: end_to_end(s, 100))
        for producers in PRODUCERS if args.cases == "all" else ():
            step("lakelog", f"concurrent_{producers}", lambda: concurrent(server, producers, n, parts))
        step("lakelog", "server", server.usage)
    finally:
        server.stop()
    if args.before:
        earlier = LakelogServer(checkout=Path(args.before).resolve())
        try:
            s = earlier.bootstrap
            step("before", "acks1", lambda: perf(s, n, parts, "1"))
            step("before", "acks_all", lambda: perf(s, n, parts, "all"))
            step("before", "steady", lambda: steady(s, parts, 5000, 10))
            step("before", "e2e", lambda: end_to_end(s, 100))
            step("before", "server", earlier.usage)
        finally:
            earlier.stop()
    figures["load_after"] = os.getloadavg()
    out.write_text(json.dumps(figures, indent=2))
    k, ll = figures["kafka"], figures["lakelog"]
    b = figures.get("before")
    rows = [("produce acks=1, rec/s", ll["acks1"]["produce_rec_s"], k["acks1"]["produce_rec_s"]),
            ("produce acks=all, rec/s", ll["acks_all"]["produce_rec_s"], k["acks_all"]["produce_rec_s"]),
            *([("produce acks=1, object-store producer settings, rec/s", ll["acks1_object_store_settings"]["produce_rec_s"],
                k["acks1"]["produce_rec_s"])] if "acks1_object_store_settings" in ll else []),
            ("consume, rec/s", ll["acks1"]["consume_rec_s"], k["acks1"]["consume_rec_s"]),
            ("produce p99 at 5,000 rec/s, ms", ll["steady"]["p99_ms"], k["steady"]["p99_ms"]),
            ("end-to-end p50, ms", ll["e2e"]["p50_ms"], k["e2e"]["p50_ms"]),
            ("end-to-end p99, ms", ll["e2e"]["p99_ms"], k["e2e"]["p99_ms"])]
    earlier = {"produce acks=1, rec/s": ("acks1", "produce_rec_s"), "produce acks=all, rec/s": ("acks_all", "produce_rec_s"),
               "consume, rec/s": ("acks1", "consume_rec_s"), "produce p99 at 5,000 rec/s, ms": ("steady", "p99_ms"),
               "end-to-end p50, ms": ("e2e", "p50_ms"), "end-to-end p99, ms": ("e2e", "p99_ms")}
    print(f"{'case':60} {'lakelog serve':>14} {'Kafka 4.4':>12} {'ratio':>8}" + (f" {'before':>12} {'ratio':>8}" if b else ""))
    for what, mine, theirs in rows:
        line = f"{what:60} {mine:14,.1f} {theirs:12,.1f} {mine / theirs if theirs else float('nan'):8.2f}"
        if b and what in earlier:
            then = b[earlier[what][0]][earlier[what][1]]
            line += f" {then:12,.1f} {then / theirs if theirs else float('nan'):8.2f}"
        print(line)
    for c in (ll[f"concurrent_{producers}"] for producers in PRODUCERS if f"concurrent_{producers}" in ll):
        print(f"{c['producers']:3} librdkafka producers into lakelog serve: {c['rec_s']:10,.0f} rec/s, "
              f"{c['commits_s']:5.1f} Delta commits/s, {c['records_per_commit']:8,.0f} records a commit")
    for name, u in (("server", ll["server"]), ("before", b["server"] if b else None)):
        if u:
            print(f"{name}: {u['start_s']} s to listen; CPU {u['python_cpu_s']} s in Python, {u['jvm_cpu_s']} s in the "
                  f"JVM; {u['rss_mib']} MiB resident at the end")
    print(f"figures: {out}")


if __name__ == "__main__":
    main()
