"""Transactions through ``lakelog serve`` beside a Kafka 4.4 broker on the same machine.

    .venv/bin/python benchmarks/transactions.py [--records 200000] [--partitions 16]
                                                [--durations 100,1000] [--keys 10000] [--e2e-seconds 10]
                                                [--e2e-rate 1000] [--e2e-commit-ms 100]
                                                [--cases all|produce|e2e|growth] [--growth 200,25]
                                                [--py-spy FILE] [--json-out FILE]

Each case runs against the broker, then at once against ``lakelog serve`` (its own process over a
fresh root, no JVM; one server for the whole run), so a pair shares the machine's state. Each
side's first transaction (the broker's transaction log made) is not timed.

1. Kafka's ProducerPerformance with ``--transactional-id`` and ``--transaction-duration-ms`` D (100
   ms, Kafka Streams' exactly-once commit interval, and 1000 ms): ``records`` of 120 bytes into
   ``partitions``, keys random in [0, ``keys``) as a Kafka Streams app's output is keyed (so every
   transaction writes to every partition), acks all (a transactional producer's own). The tool
   commits when D has passed since the transaction began and waits for the commit before sending
   on, so its rate counts the commits' time. Records and MB a second, average and p99 latency,
   transactions a second (the markers the run left, from the partitions' end offsets less the
   records, over the partitions, over the run's time: records / rate), and the average
   ``commitTransaction`` (its flush and EndTxn; the producer's own metric, ``--print-metrics``).
2. read_committed end to end: one process with a librdkafka transactional producer, producing at
   ``e2e-rate`` records a second and committing every ``e2e-commit-ms``, and a read_committed
   consumer assigned the topic's one partition; each record's produce call to its arrival at the
   consumer, and each transaction's ``commit_transaction`` call to the arrival of its last record,
   both on this process's monotonic clock. p50 and p99, and the commit call's p50 over the first
   and the last tenth of the transactions (whether a commit slows as they accumulate); at the end
   the server's ``transactions`` table: its rows and files.

``--cases growth`` (``--growth 200,25``): no broker and no server, the coordinator's own steps on
a fresh local root, in-process: per block of transactions, the median time of reading one id's
row, of AddPartitionsToTxn and of EndTxn, as the ``transactions`` table grows (compacted between
transactions, untimed, as a server's observer compacts it: at most every 5 s).

Prints each measurement as it is made, then a table with ratios (lakelog serve / Kafka); the
figures, machine and load go to ``--json-out`` (``benchmarks/out/transactions-<time>.json``) after
every measurement. ``--py-spy FILE`` records the server with py-spy (if on the path) through all
the cases, as collapsed stacks (idle threads left out). BENCHMARKS.md keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.kafka_broker import Broker, create_topic, measure  # noqa: E402
from benchmarks.serve import LakelogServer  # noqa: E402

RECORD_BYTES = 120


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Each partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offsets-{uuid.uuid4().hex[:6]}"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


def transactional_perf(bootstrap: str, records: int, partitions: int, duration_ms: int, keys: int) -> dict:
    """ProducerPerformance in transactions of ``duration_ms`` on a new topic (keys random in
    [0, ``keys``), none if 0); transactions a second from the markers the run left."""
    topic = f"txn-{duration_ms}-{uuid.uuid4().hex[:8]}"
    keyed = ["--key-distribution", "random", "--record-key-range", str(keys)] if keys else []
    out = measure(bootstrap, records, RECORD_BYTES, partitions, acks="all", topic=topic, consume=False,
                  tool_args=["--transactional-id", f"perf-{uuid.uuid4().hex[:8]}", "--transaction-duration-ms",
                             str(duration_ms), "--print-metrics", *keyed])
    ends = end_offsets(bootstrap, topic, partitions)
    markers = sum(ends) - records
    seconds = records / out["produce_rec_s"]
    txns = max(-(-markers // partitions), 1)  # keyed, a transaction of a few hundred records writes to every partition
    # (the tool's last one, committed at its end, may be a few records that miss some)
    figures = out | {"duration_ms": duration_ms, "keys": keys, "topic": topic, "markers": markers,
                     "transactions": txns, "seconds": round(seconds, 2), "txn_s": round(txns / seconds, 2)}
    if "txn-commit-time_ms" in out:
        figures["commit_avg_ms"] = round(out["txn-commit-time_ms"] / txns, 1)
    return figures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def committed_latency(bootstrap: str, seconds: float, rate: int, commit_ms: int) -> dict:
    """A transactional producer committing every ``commit_ms`` and a read_committed consumer in this
    process: each record's produce call to its arrival, each commit call to its last record's."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = f"txn-e2e-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"e2e-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    per_txn = max(1, rate * commit_ms // 1000)
    txns = max(1, int(seconds * 1000 / commit_ms))
    total = per_txn * txns
    sent, seen = [0.0] * total, [0.0] * total
    commit_called, commit_done = [0.0] * txns, [0.0] * txns
    count, stop = [0], threading.Event()
    padding = b"x" * (RECORD_BYTES - 8)

    def consume() -> None:
        while count[0] < total and not stop.is_set():
            message = consumer.poll(0.1)
            if message is None or message.error():
                continue
            now = time.monotonic()
            (i,) = struct.unpack_from(">q", message.value())
            seen[i] = now
            count[0] += 1

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(1)  # the consumer's first fetch is out before the first record
    for t in range(txns):
        producer.begin_transaction()
        began = time.monotonic()
        for j in range(per_txn):
            due = began + j / rate
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            i = t * per_txn + j
            sent[i] = time.monotonic()
            producer.produce(topic, value=struct.pack(">q", i) + padding)
            producer.poll(0)
        if (wait := began + commit_ms / 1000 - time.monotonic()) > 0:
            time.sleep(wait)
        commit_called[t] = time.monotonic()
        producer.commit_transaction(60)
        commit_done[t] = time.monotonic()
    reader.join(60)
    stop.set()
    consumer.close()
    if count[0] < total:
        raise RuntimeError(f"the read_committed consumer saw {count[0]} of {total} committed records in 60 s")
    record_ms = [1000 * (seen[i] - sent[i]) for i in range(total)]
    last = [max(seen[t * per_txn:(t + 1) * per_txn]) for t in range(txns)]
    visible_ms = [1000 * (last[t] - commit_called[t]) for t in range(txns)]
    commit_call_ms = [1000 * (commit_done[t] - commit_called[t]) for t in range(txns)]
    return {"records": total, "transactions": txns, "rate": rate, "commit_ms": commit_ms,
            "record_p50_ms": round(percentile(record_ms, 0.5), 1),
            "record_p99_ms": round(percentile(record_ms, 0.99), 1),
            "commit_to_visible_p50_ms": round(percentile(visible_ms, 0.5), 1),
            "commit_to_visible_p99_ms": round(percentile(visible_ms, 0.99), 1),
            "commit_call_p50_ms": round(percentile(commit_call_ms, 0.5), 1),
            "commit_call_p99_ms": round(percentile(commit_call_ms, 0.99), 1),
            # whether a commit slows as transactions accumulate: the first and the last tenth's median
            "commit_call_first_tenth_p50_ms": round(percentile(commit_call_ms[:max(1, txns // 10)], 0.5), 1),
            "commit_call_last_tenth_p50_ms": round(percentile(commit_call_ms[-max(1, txns // 10):], 0.5), 1)}


def transactions_table(root: str) -> dict:
    """The size of a server's ``transactions`` control table: rows (every version of every id) and files."""
    from control_plane.layout import RootLayout
    from log_store import rs_reader

    path = RootLayout(root).control("transactions")
    files = len(list(Path(path).glob("**/*.parquet")))
    return {"rows": len(rs_reader.rows(path)), "files": files, "version": rs_reader.version(path)}


def coordinator_growth(total: int, block: int) -> list[dict]:
    """The coordinator's steps alone (no server, no Spark, no topic: no markers) on a fresh local
    root, as its ``transactions`` table grows: per block of ``block`` transactions, the median of
    one id's read, AddPartitionsToTxn and EndTxn."""
    import statistics
    import tempfile

    from control_plane.transactions.coordinator import TransactionCoordinator
    from jobs.config import load_config
    from log_store.session import LazySession

    def no_spark():
        raise RuntimeError("the coordinator's steps on a local root should need no Spark session")

    folder = tempfile.mkdtemp(prefix="lakelog-txn-growth-")
    try:
        root = folder + "/root"
        coordinator = TransactionCoordinator(LazySession(no_spark, load_config(None, root).spark.conf), root)
        epoch = coordinator.init_producer_id("growth").epoch
        times: dict[str, list[float]] = {"get": [], "add_partitions": [], "end_txn": []}
        out = []
        for i in range(1, total + 1):
            began = time.perf_counter()
            coordinator.table.get("growth")
            read = time.perf_counter()
            coordinator.add_partitions("growth", epoch, {"absent": [0]})
            added = time.perf_counter()
            epoch = coordinator.end_txn("growth", epoch, commit=True).epoch
            ended = time.perf_counter()
            coordinator.compact()  # as a server's observer does (at most every 5 s), not timed
            for name, seconds in (("get", read - began), ("add_partitions", added - read), ("end_txn", ended - added)):
                times[name].append(seconds)
            if i % block == 0:
                out.append({"transactions": i, "rows": len(coordinator.table.rows()),
                            "load": round(os.getloadavg()[0], 2)}
                           | {f"{name}_p50_ms": round(1000 * statistics.median(t[-block:]), 1)
                              for name, t in times.items()})
                print(json.dumps(out[-1]), flush=True)
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Profile:
    """py-spy recording a process as collapsed stacks, until ``stop``; nothing if py-spy is not on the path."""

    def __init__(self, pid: int, out: str | None) -> None:
        spy = shutil.which("py-spy")
        self.process = None
        if out and not spy:
            print("--py-spy: py-spy is not on the path; no profile", flush=True)
        elif out:
            self.process = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "100", "--threads",
                                             "--format", "raw", "--output", out, "--nonblocking"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1)

    def stop(self) -> None:
        if self.process:
            self.process.send_signal(2)  # py-spy writes its file on SIGINT
            self.process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--durations", default="100,1000", help="ProducerPerformance's --transaction-duration-ms, each")
    parser.add_argument("--keys", type=int, default=10_000, help="random keys in [0, KEYS); 0: none (then transactions "
                        "a second are a lower bound: a transaction may miss a partition)")
    parser.add_argument("--e2e-seconds", type=float, default=10)
    parser.add_argument("--e2e-rate", type=int, default=1000)
    parser.add_argument("--e2e-commit-ms", type=int, default=100)
    parser.add_argument("--cases", choices=["all", "produce", "e2e", "growth"], default="all",
                        help="growth: only the coordinator's steps as its table grows (no broker, no server)")
    parser.add_argument("--growth", default="200,25", help="growth: TRANSACTIONS,BLOCK")
    parser.add_argument("--py-spy", default=None, help="record the server through the produce cases into this file")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    durations = [int(d) for d in args.durations.split(",")]
    figures: dict = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": os.getloadavg(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "records": args.records,
                     "partitions": args.partitions,
                     "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                              cwd=HERE).stdout.strip()}
    out = Path(args.json_out or HERE / "out" / f"transactions-{int(time.time())}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def step(side: str, name: str, run) -> None:
        started = time.monotonic()
        figures.setdefault(side, {})[name] = run() | {"load": round(os.getloadavg()[0], 2)}
        print(f"{side} {name} ({time.monotonic() - started:.0f} s): {json.dumps(figures[side][name])}", flush=True)
        out.write_text(json.dumps(figures, indent=2))

    n, parts = args.records, args.partitions
    if args.cases == "growth":
        total, block = (int(v) for v in args.growth.split(","))
        figures["growth"] = coordinator_growth(total, block)
        figures["load_after"] = os.getloadavg()
        out.write_text(json.dumps(figures, indent=2))
        print(f"figures: {out}")
        return
    with Broker() as broker:
        server = LakelogServer()
        try:
            sides = (("kafka", broker.bootstrap), ("lakelog", server.bootstrap))
            for _side, bootstrap in sides:  # each side's coordinator up and its first transaction, not timed
                transactional_perf(bootstrap, 2000, parts, 100, args.keys)
            profile = Profile(server.process.pid, args.py_spy)
            try:
                for d in durations if args.cases in ("all", "produce") else ():
                    for side, bootstrap in sides:
                        step(side, f"txn_{d}ms", lambda: transactional_perf(bootstrap, n, parts, d, args.keys))
                for side, bootstrap in sides if args.cases in ("all", "e2e") else ():
                    step(side, "e2e", lambda: committed_latency(bootstrap, args.e2e_seconds, args.e2e_rate,
                                                                args.e2e_commit_ms))
            finally:
                profile.stop()
            figures["lakelog"]["server"] = server.usage()
            figures["lakelog"]["transactions_table"] = transactions_table(server.root)
        finally:
            server.stop()
            shutil.rmtree(Path(server.root).parent, ignore_errors=True)
    figures["load_after"] = os.getloadavg()
    out.write_text(json.dumps(figures, indent=2))
    report(figures, durations)
    print(f"figures: {out}")


def report(figures: dict, durations: list[int]) -> None:
    k, ll = figures["kafka"], figures["lakelog"]
    rows = []
    for d in durations:
        if f"txn_{d}ms" in k:
            a, b = ll[f"txn_{d}ms"], k[f"txn_{d}ms"]
            rows += [(f"transactions of {d} ms: records/s", a["produce_rec_s"], b["produce_rec_s"]),
                     (f"transactions of {d} ms: MB/s", a["produce_mb_s"], b["produce_mb_s"]),
                     (f"transactions of {d} ms: avg latency, ms", a["produce_avg_ms"], b["produce_avg_ms"]),
                     (f"transactions of {d} ms: p99 latency, ms", a["produce_p99_ms"], b["produce_p99_ms"]),
                     (f"transactions of {d} ms: transactions/s", a["txn_s"], b["txn_s"])]
            if "commit_avg_ms" in a and "commit_avg_ms" in b:
                rows.append((f"transactions of {d} ms: commitTransaction avg, ms", a["commit_avg_ms"],
                             b["commit_avg_ms"]))
    if "e2e" in k:
        a, b = ll["e2e"], k["e2e"]
        for key, what in (("record_p50_ms", "produce to read_committed consumer, p50 ms"),
                          ("record_p99_ms", "produce to read_committed consumer, p99 ms"),
                          ("commit_to_visible_p50_ms", "commit call to last record read, p50 ms"),
                          ("commit_to_visible_p99_ms", "commit call to last record read, p99 ms"),
                          ("commit_call_p50_ms", "commit_transaction call, p50 ms"),
                          ("commit_call_p99_ms", "commit_transaction call, p99 ms"),
                          ("commit_call_first_tenth_p50_ms", "commit_transaction call, first tenth's p50 ms"),
                          ("commit_call_last_tenth_p50_ms", "commit_transaction call, last tenth's p50 ms")):
            rows.append((what, a[key], b[key]))
    print(f"{'case':52} {'lakelog serve':>14} {'Kafka 4.4':>12} {'ratio':>8}")
    for what, mine, theirs in rows:
        print(f"{what:52} {mine:14,.1f} {theirs:12,.1f} {mine / theirs if theirs else float('nan'):8.2f}")
    if "server" in ll:
        u, t = ll["server"], ll["transactions_table"]
        print(f"server: {u['start_s']} s to listen; CPU {u['python_cpu_s']} s in Python; {u['rss_mib']} MiB resident; "
              f"its transactions table {t['rows']:,} rows in {t['files']:,} files at version {t['version']:,}")


if __name__ == "__main__":
    main()
