"""A soak: many small produces into one topic with retention and compaction on their usual
schedule, against raw Delta appends of the same rows in the same run.

    .venv/bin/python benchmarks/soak.py [--produces 10000] [--partitions 16,64] [--tick-every 50]
                                        [--measure 100] [--fast-forward] [--retention-bytes N]

Each produce is 100-500 keyed records (sizes drawn from a fixed seed). A measured produce is one
lakelog ``Producer.send``, exactly as a scheduled job produces, and the same rows appended to a
plain Delta table partitioned the same way (``df.write.format("delta").mode("append")``). Every
``--tick-every`` produces, ``controller tick`` runs (retention by ``retention.bytes``, then
compaction to ``segment.bytes``) and the raw table is compacted to the same target size.

Produces are measured in three windows of ``--measure``: the first, middle and last. Without
``--fast-forward`` every produce goes through lakelog. With it, the produces between the windows
are written by ``FastForward``: the same Delta actions a produce commits, written with delta-rs in
~20 ms instead of a Spark job (10,000 produces at 16 partitions: 90 minutes); every tick still runs.

Reported: produce latency p50/p95 per window for both; files in the table, bytes of its Delta log
and of its newest checkpoint over time; a new group's full read of what is left against a raw
sorted read of the same rows (after compaction); a caught-up group's batch latency; tick times.
Prints tables and writes the figures as JSON to benchmarks/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from deltalake import CommitProperties, PostCommitHookProperties, Transaction, write_deltalake  # noqa: E402
from deltalake import DeltaTable as RsTable  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from control_plane.controller import TopicController  # noqa: E402
from control_plane.topics import TopicAdmin  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.names import commit_metadata, log_end_app_id, producer_app_id  # noqa: E402
from log_store.partitioner import partition_for  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.consumer import Consumer  # noqa: E402
from pipelines.producer import Producer  # noqa: E402
from pipelines.settings import ConsumerSettings  # noqa: E402

console = Console(stderr=True)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def table_state(path: str) -> tuple[int, int, int]:
    """(data files in the current snapshot, bytes of the _delta_log folder, bytes of its newest
    checkpoint: Delta writes one every ``delta.checkpointInterval`` commits, with the removed
    files it still remembers)."""
    files = len(RsTable(path).file_uris())
    entries = [f for f in Path(path, "_delta_log").iterdir() if f.is_file()]
    checkpoints = sorted((f for f in entries if ".checkpoint" in f.name and f.suffix == ".parquet"), key=lambda f: f.name)
    return files, sum(f.stat().st_size for f in entries), checkpoints[-1].stat().st_size if checkpoints else 0


NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def checkpoint_as_spark(table: RsTable) -> None:
    """A checkpoint at every ``delta.checkpointInterval``-th version (10 if unset), as Spark
    writes one (delta-rs's own interval is 100), compressed with Snappy as Spark's are: delta-rs
    writes them uncompressed, twice the bytes (a Spark checkpoint of the same version: 213 kB,
    delta-rs's 436 kB, re-encoded 220 kB)."""
    if table.version() % int(table.metadata().configuration.get("delta.checkpointInterval", "10")):
        return
    table.create_checkpoint()
    log = Path(table.table_uri.removeprefix("file://"), "_delta_log")
    name = log / f"{table.version():020d}.checkpoint.parquet"
    staged = name.with_suffix(".snappy")
    pq.write_table(pq.read_table(name), staged, compression="snappy")
    staged.replace(name)
    hint = json.loads((log / "_last_checkpoint").read_text())
    hint["sizeInBytes"] = name.stat().st_size
    (log / "_last_checkpoint").write_text(json.dumps(hint))


class FastForward:
    """Writes a produce's Delta actions with delta-rs instead of lakelog's Spark job, to reach the
    table state of many produces in minutes: the same rows (dense offsets from each partition's log
    end, the leader epoch, the producer's sequences), one file per partition written, and in the
    same commit the set transactions lakelog's append sets (each moved log end, the producer's
    highest sequence); a checkpoint at the table's checkpoint interval, as Spark writes one.
    Nothing is measured while it runs. The raw table gets the same rows as plain appends."""

    def __init__(self, spark, root: str, topic: str, location: str, raw: str, producer: Producer):
        snap = TopicAdmin(spark, root).log(topic).snapshot()
        self.ends = dict(snap.log_ends)
        self.epochs = {p: pm.leader_epoch for p, pm in snap.metadata.partitions.items()}
        self.sequence = producer.next_sequence()
        self.producer_id = producer.producer_id
        self.log = RsTable(location)
        self.raw = RsTable(raw)
        self.schema = pa.schema(self.log.schema().to_arrow())

    def produce(self, batch_keys: list[str], values: list[str], part_of: dict[str, int]) -> None:
        n = len(batch_keys)
        parts = [part_of[k] for k in batch_keys]
        order = sorted(range(n), key=parts.__getitem__)  # stable: each partition keeps input order
        nxt = dict(self.ends)
        offsets = []
        for j in order:
            offsets.append(nxt[parts[j]])
            nxt[parts[j]] += 1
        now = time.time_ns() // 1000
        rows = pa.table({
            "partition": pa.array([parts[j] for j in order], pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "leader_epoch": pa.array([self.epochs[parts[j]] for j in order], pa.int32()),
            "key": pa.array([batch_keys[j].encode() for j in order], pa.binary()),
            "value": pa.array([values[j].encode() for j in order], pa.binary()),
            "headers": pa.nulls(n, self.schema.field("headers").type),
            "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "producer_id": pa.array([self.producer_id] * n, pa.string()),
            "sequence": pa.array([self.sequence + j for j in order], pa.int64()),
        }, schema=self.schema)
        moved = {p: e for p, e in nxt.items() if e != self.ends[p]}
        txns = [Transaction(log_end_app_id(p), e) for p, e in moved.items()]
        txns.append(Transaction(producer_app_id(self.producer_id), self.sequence + n - 1))
        ranges = {str(p): [self.ends[p], e] for p, e in sorted(moved.items())}
        self._append(self.log, rows, CommitProperties(app_transactions=txns, custom_metadata={
            "userMetadata": commit_metadata("append", producer_id=self.producer_id, ranges=ranges)}))
        self._append(self.raw, pa.table({"key": batch_keys, "value": values,
                                         "partition": pa.array(parts, pa.int32())}), None)
        self.ends = nxt
        self.sequence += n

    @staticmethod
    def _append(table: RsTable, rows: pa.Table, commit: CommitProperties | None) -> None:
        write_deltalake(table, rows, mode="append", partition_by=["partition"], commit_properties=commit,
                        post_commithook_properties=NO_HOOKS)
        checkpoint_as_spark(table)


def measured_windows(produces: int, size: int) -> dict[str, range]:
    """The produces whose latency is reported: the first, middle and last ``size``."""
    return {"first": range(0, size), "middle": range(produces // 2 - size // 2, produces // 2 - size // 2 + size),
            "last": range(produces - size, produces)}


def run(spark, workdir: Path, partitions: int, produces: int, tick_every: int, retention_bytes: int,
        segment_bytes: int, measure: int, fast_forward: bool) -> dict:
    root = str(workdir / f"root{partitions}")
    raw = str(workdir / f"raw{partitions}")
    topic = "soak"
    TopicAdmin(spark, root).create(topic, partitions)
    ctl = TopicController(spark, root)
    ctl.alter_config(topic, [f"retention.bytes={retention_bytes}", f"segment.bytes={segment_bytes}"])
    location = TopicAdmin(spark, root).get(topic).location
    producer = Producer(spark, root, topic, "soak")
    # The raw table checkpoints as often as a topic's log does (``delta.checkpointInterval``).
    interval = RsTable(location).metadata().configuration.get("delta.checkpointInterval", "10")
    spark.sql(f"CREATE TABLE delta.`{raw}` (key STRING, value STRING, partition INT) USING delta "
              f"PARTITIONED BY (partition) TBLPROPERTIES ('delta.checkpointInterval' = '{interval}')")
    rng = random.Random(7)
    keys = [f"key-{i}" for i in range(10_000)]
    part_of = {k: partition_for(k.encode(), partitions) for k in keys}
    sizes = [rng.randint(100, 500) for _ in range(produces)]
    windows = measured_windows(produces, measure)
    measured = {i for w in windows.values() for i in w} if fast_forward else set(range(produces))
    lat, raw_lat, samples, ticks, raw_compactions = {}, {}, [], [], []
    sent = 0
    ff: FastForward | None = None
    began = time.perf_counter()
    for i, n in enumerate(sizes):
        batch_keys = [keys[(sent + j) % len(keys)] for j in range(n)]
        values = [f"{sent + j:0100d}" for j in range(n)]
        if i not in measured:
            ff = ff or FastForward(spark, root, topic, location, raw, producer)
            ff.produce(batch_keys, values, part_of)
        else:
            ff = None  # lakelog commits now: a later fast-forward starts from the log ends it leaves
            df = spark.createDataFrame(pa.table({"key": batch_keys, "value": values}))  # Arrow: no row-by-row pickling
            t = time.perf_counter()
            producer.send(df)
            lat[i] = time.perf_counter() - t
            raw_df = spark.createDataFrame(pa.table({"key": batch_keys, "value": values,
                                                     "partition": pa.array([part_of[k] for k in batch_keys], pa.int32())}))
            t = time.perf_counter()
            raw_df.coalesce(1).write.format("delta").mode("append").partitionBy("partition").save(raw)  # a file per partition
            raw_lat[i] = time.perf_counter() - t
        sent += n
        if (i + 1) % tick_every == 0:
            ff = None  # the tick commits to the log: delta-rs reloads it
            t = time.perf_counter()
            ctl.tick(topic)
            ticks.append(time.perf_counter() - t)
            # the raw table is kept compacted the same way (OPTIMIZE to the same target size)
            t = time.perf_counter()
            raw_table = RsTable(raw)
            raw_table.optimize.compact(target_size=segment_bytes, post_commithook_properties=NO_HOOKS)
            checkpoint_as_spark(raw_table)
            raw_compactions.append(time.perf_counter() - t)
        if (i + 1) % max(1, produces // 20) == 0 or i + 1 == produces:
            files, log_bytes, checkpoint = table_state(location)
            raw_files, raw_log, raw_checkpoint = table_state(raw)
            samples.append({"produces": i + 1, "files": files, "log_bytes": log_bytes, "checkpoint_bytes": checkpoint,
                            "raw_files": raw_files, "raw_log_bytes": raw_log, "raw_checkpoint_bytes": raw_checkpoint,
                            "wall_s": time.perf_counter() - began})
            recent = [lat[k] for k in sorted(lat)[-50:]]
            console.print(f"{partitions} partitions: {i + 1}/{produces} produces, {files} files "
                          f"(raw {raw_files}), log {log_bytes / 2**20:.0f} MiB, checkpoint {checkpoint / 2**10:.0f} KiB, "
                          f"last measured produce p50 {statistics.median(recent) * 1000:.0f} ms, "
                          f"{time.perf_counter() - began:.0f} s")
    ctl.tick(topic)
    # a new group's full read of what retention left, against a raw sorted read of the same rows
    snap = TopicAdmin(spark, root).log(topic).snapshot()
    left = sum(snap.log_ends[p] - snap.first_offset(p) for p in snap.readable())
    t = time.perf_counter()
    got = Consumer(spark, root, topic, "newcomer", ConsumerSettings(max_records_per_batch=10**9)).run(lambda b, r: b.write.format("noop").mode("overwrite").save())
    new_read = time.perf_counter() - t
    assert got.records == left, (got.records, left)
    t = time.perf_counter()
    (spark.read.format("delta").load(location).where(F.expr(" OR ".join(
        f"(partition = {p} AND offset >= {snap.first_offset(p)})" for p in snap.readable())))
     .orderBy("partition", "offset").write.format("noop").mode("overwrite").save())
    raw_read = time.perf_counter() - t
    # a caught-up group: one more produce, then its batch
    caught = []
    for _ in range(5):
        producer.send(spark.createDataFrame([(keys[j], "x") for j in range(200)], "key string, value string"))
        t = time.perf_counter()
        Consumer(spark, root, topic, "newcomer").run(lambda b, r: b.write.format("noop").mode("overwrite").save())
        caught.append(time.perf_counter() - t)
    return {
        "partitions": partitions, "produces": produces, "records": sent, "left_after_retention": left,
        "checkpoint_interval": int(interval), "segment_bytes": segment_bytes, "retention_bytes": retention_bytes,
        "fast_forwarded": produces - len(measured),
        "windows": {k: {"produces": [w.start + 1, w.stop], "p50_ms": statistics.median(a) * 1000,
                        "p95_ms": pct(a, 0.95) * 1000, "raw_p50_ms": statistics.median(b) * 1000,
                        "raw_p95_ms": pct(b, 0.95) * 1000}
                    for k, w in windows.items() for a, b in [([lat[i] for i in w], [raw_lat[i] for i in w])]},
        "samples": samples, "tick_p50_s": statistics.median(ticks) if ticks else None,
        "tick_p95_s": pct(ticks, 0.95) if ticks else None,
        "raw_compaction_p50_s": statistics.median(raw_compactions) if raw_compactions else None,
        "new_group_read_s": new_read, "raw_sorted_read_s": raw_read, "read_ratio": raw_read / new_read,
        "caught_up_batch_p50_s": statistics.median(caught), "wall_s": time.perf_counter() - began,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--produces", type=int, default=10_000)
    ap.add_argument("--partitions", default="16,64")
    ap.add_argument("--tick-every", type=int, default=50)
    # Small enough that retention deletes at 64 partitions too (about 0.85 MB each after 10,000 produces)
    ap.add_argument("--retention-bytes", type=int, default=512 * 1024)
    ap.add_argument("--segment-bytes", type=int, default=128 * 1024,
                    help="compaction's target; retention deletes whole files, so keep it below --retention-bytes")
    ap.add_argument("--measure", type=int, default=100, help="produces in each measured window")
    ap.add_argument("--fast-forward", action="store_true",
                    help="write the produces outside the measured windows with delta-rs (FastForward)")
    args = ap.parse_args()
    spark = build_session(SparkSettings())
    results = []
    Path("benchmarks/out").mkdir(parents=True, exist_ok=True)
    out_file = Path(f"benchmarks/out/soak-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json")
    for n in [int(x) for x in args.partitions.split(",")]:
        workdir = Path(tempfile.mkdtemp(prefix="lakelog-soak-"))
        try:
            results.append(run(spark, workdir, n, args.produces, args.tick_every, args.retention_bytes,
                               args.segment_bytes, args.measure, args.fast_forward))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # a full soak leaves GBs of checkpoints
        out_file.write_text(json.dumps(  # after each topic: a long run keeps what it measured
            {"machine": platform.node(), "cpus": os.cpu_count(), "args": vars(args), "results": results}, indent=2))
    out = Table(title=f"soak: {args.produces} produces, tick every {args.tick_every}"
                      + (f", {args.measure} measured per window, the rest fast-forwarded" if args.fast_forward else ""))
    for col in ("partitions", "window", "produce p50/p95 ms", "raw p50/p95 ms"):
        out.add_column(col)
    for r in results:
        for name, w in r["windows"].items():
            out.add_row(str(r["partitions"]), f"{name} ({w['produces'][0]}-{w['produces'][1]})",
                        f"{w['p50_ms']:.0f} / {w['p95_ms']:.0f}",
                        f"{w['raw_p50_ms']:.0f} / {w['raw_p95_ms']:.0f}")
    Console().print(out)
    state = Table(title="files and Delta log bytes over time (lakelog / raw)")
    for col in ("partitions", "produces", "files", "raw files", "log KiB", "raw log KiB", "checkpoint KiB",
                "raw checkpoint KiB"):
        state.add_column(col)
    for r in results:
        for s in r["samples"][:: max(1, len(r["samples"]) // 5)] + r["samples"][-1:]:
            state.add_row(str(r["partitions"]), str(s["produces"]), str(s["files"]), str(s["raw_files"]),
                          f"{s['log_bytes'] / 1024:.0f}", f"{s['raw_log_bytes'] / 1024:.0f}",
                          f"{s['checkpoint_bytes'] / 1024:.0f}", f"{s['raw_checkpoint_bytes'] / 1024:.0f}")
    Console().print(state)
    reads = Table(title="reads after the soak")
    for col in ("partitions", "records left", "new group read s", "raw sorted read s", "ratio", "caught-up batch s",
                "tick p50 / p95 s", "raw compaction p50 s"):
        reads.add_column(col)
    for r in results:
        reads.add_row(str(r["partitions"]), str(r["left_after_retention"]), f"{r['new_group_read_s']:.2f}",
                      f"{r['raw_sorted_read_s']:.2f}", f"{r['read_ratio']:.2f}", f"{r['caught_up_batch_p50_s']:.2f}",
                      f"{r['tick_p50_s']:.2f} / {r['tick_p95_s']:.2f}" if r["tick_p50_s"] else "-",
                      f"{r['raw_compaction_p50_s']:.2f}" if r["raw_compaction_p50_s"] else "-")
    Console().print(reads)


if __name__ == "__main__":
    main()
