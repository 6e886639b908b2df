"""format("lakelog") against Spark's own Delta source and sink on the same rows, in one run.

    .venv/bin/python benchmarks/spark_format.py [--records 1000000] [--partitions 8,64] [--latency-runs 20]
        [--cases stream,batch,write,latency,small] [--profile DIR] [--source jvm|python] [--session classic|connect]

Cases (each lakelog figure next to raw Delta's on the same rows; ratio = raw time / lakelog time,
so 1.0 is parity and higher is better for lakelog):
- stream: readStream.format("lakelog") of the topic into a Delta sink, Trigger.AvailableNow, against
  readStream.format("delta") of a plain Delta table holding the same rows into a Delta sink, and of
  the log's own table (its files and columns);
- batch read: spark.read.format("lakelog") of the topic against spark.read.format("delta") of the
  same rows (both written to the noop sink, so every row is read);
- write: df.write.format("lakelog") against df.write.format("delta") of the same rows, and against
  Delta's writer alone writing the rows lakelog wrote (the log's nine columns, plain and partitioned
  by ``partition``): the part of the gap that is the log's shape;
- latency: a 100-record produce to visible in a running stream's Delta sink, p50 / p95, beside a raw
  100-row Delta append to visible through readStream.format("delta") into a Delta sink;
- small produces: a 100-record produce (``Producer.send``) from local rows, from a filter of a
  cached 500k-row DataFrame and from a file read, against a raw 100-row Delta append, alternated,
  p50 each (ratio = lakelog / raw here: 1.5 is the aim).
``--cases`` runs some of them (the bulk cases write the topic either way); ``--profile DIR`` also
writes where each case's time went (``benchmarks/spark_profile.py``) to DIR/profile.txt.
``--source python`` reads (stream, batch, latency) and writes (write) through the Python data
source (``pipelines.spark.python_source``, registered as ``lakelog_python`` beside the JVM source,
which owns ``lakelog`` in this session) instead of the JVM source and sink.
``--session connect`` runs every case through a Spark Connect client session on the product's local
Connect server (``log_store.connect_server``: a server without lakelog's jar, as serverless runs),
where ``format("lakelog")`` is the Python data source; raw Delta runs on the same Connect session.
The process then holds no classic session (one JVM cannot hold both): ``pyspark.sql.functions``
builds Connect columns. ``--profile`` there times the cases and the client's Python only: the
source's own Python runs in the server's workers.
Prints a table and writes the figures as JSON to benchmarks/out/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deltalake import DeltaTable as RsTable  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from control_plane.topics import TopicAdmin  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.connect_server import ConnectServer  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.producer import Producer  # noqa: E402
from pipelines.settings import ProducerSettings  # noqa: E402
from pipelines.spark import register  # noqa: E402
from pipelines.spark.bridge import FormatSide  # noqa: E402
from pipelines.spark import python_source  # noqa: E402
from spark_profile import Profile, event_log_conf  # noqa: E402

ALL_CASES = ("stream", "batch", "write", "latency", "small")

console = Console(stderr=True)


PROFILE: Profile | None = None
READS = "lakelog"  # the format reads go through: the JVM source, or the Python one (--source python)
WRITES = "lakelog"  # the format the write case goes through, likewise
PYTHON_NAME = "lakelog_python"


def timed(fn, case: str | None = None):
    """Seconds ``fn`` took (inside ``case``'s profile window when profiling)."""
    if PROFILE is None or case is None:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    with PROFILE.window(case, python=True):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


def rows(spark, n: int, keys: int = 10_000, value_bytes: int = 100, start: int = 0):
    return spark.range(start, start + n).select(
        F.concat(F.lit("key-"), (F.col("id") % keys).cast("string")).alias("key"),
        F.rpad(F.col("id").cast("string"), value_bytes, "x").alias("value"),
    )


def stream_into(spark, reader, sink: str, checkpoint: str) -> None:
    reader.writeStream.format("delta").option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start(sink).awaitTermination()


def bulk_cases(spark, root: str, work: Path, n: int, partitions: int, cases=ALL_CASES) -> list[dict]:
    topic = f"bench-{partitions}"
    TopicAdmin(spark, root).create(topic, partitions)
    data = rows(spark, n).persist()
    data.count()
    raw = str(work / f"raw-{partitions}")
    out = []
    tag = f"{n} <- {partitions}"
    # write: lakelog's sink against a plain Delta append of the same rows (the other cases read them)
    t_raw = timed(lambda: data.write.format("delta").mode("append").save(raw), f"delta write {tag}")
    t_ll = timed(lambda: data.write.format(WRITES).option("root", root).option("topic", topic).mode("append").save(),
                 f"lakelog write {tag}")
    if "write" in cases:
        out.append({"case": f"write 1 x {n:,} -> {partitions}", "lakelog_s": t_ll, "delta_s": t_raw})
        out += log_columns_floor(spark, root, work, topic, n, partitions, t_ll)
    if "batch" in cases:  # batch read of everything
        t_raw = timed(lambda: spark.read.format("delta").load(raw).write.format("noop").mode("overwrite").save(),
                      f"delta batch read {tag}")
        t_ll = timed(lambda: spark.read.format(READS).option("root", root).option("subscribe", topic).load()
                     .write.format("noop").mode("overwrite").save(), f"lakelog batch read {tag}")
        out.append({"case": f"batch read {n:,} <- {partitions}", "lakelog_s": t_ll, "delta_s": t_raw})
    if "stream" in cases:  # a stream of everything into a Delta sink, availableNow
        t_raw = timed(lambda: stream_into(spark, spark.readStream.format("delta").load(raw),
                                          str(work / f"raw-sink-{partitions}"), str(work / f"raw-ck-{partitions}")),
                      f"delta stream {tag}")
        t_ll = timed(lambda: stream_into(
            spark, spark.readStream.format(READS).option("root", root).option("subscribe", topic)
            .option("startingOffsets", "earliest").load(),
            str(work / f"ll-sink-{partitions}"), str(work / f"ll-ck-{partitions}")), f"lakelog stream {tag}")
        out.append({"case": f"stream {n:,} <- {partitions} into Delta, availableNow", "lakelog_s": t_ll,
                    "delta_s": t_raw})
        # the log's own table through Delta's source: the same files and columns lakelog's stream reads
        location = TopicAdmin(spark, root).get(topic).location
        t_log = timed(lambda: stream_into(spark, spark.readStream.format("delta").load(location),
                                          str(work / f"log-sink-{partitions}"), str(work / f"log-ck-{partitions}")))
        out.append({"case": f"stream {n:,} <- {partitions} into Delta, availableNow, Delta reading the log's table",
                    "lakelog_s": t_ll, "delta_s": t_log})
    data.unpersist()
    for r in out:
        r["ratio"] = r["delta_s"] / r["lakelog_s"]
    return out


def log_columns_floor(spark, root: str, work: Path, topic: str, n: int, partitions: int, t_ll: float) -> list[dict]:
    """What Delta's writer alone takes for the rows lakelog writes: the log's own nine columns
    (read back from the topic in the input's order and cached, untimed), as a plain append and partitioned by
    ``partition`` as the log is. The gap between these and the two-column append above is the
    log's shape, not lakelog's work."""
    # in the input's order and tasks (sequence order, 4 tasks), not grouped by partition as the log holds them
    logged = spark.read.format("delta").load(TopicAdmin(spark, root).get(topic).location) \
        .repartitionByRange(4, "sequence").sortWithinPartitions("sequence").persist()
    logged.count()
    plain = timed(lambda: logged.write.format("delta").save(str(work / f"floor-plain-{partitions}")))
    parted = timed(lambda: logged.write.format("delta").partitionBy("partition")
                   .save(str(work / f"floor-partitioned-{partitions}")))
    logged.unpersist()
    return [{"case": f"write 1 x {n:,} -> {partitions}, Delta with the log's 9 columns", "lakelog_s": t_ll,
             "delta_s": plain},
            {"case": f"write 1 x {n:,} -> {partitions}, Delta with the log's 9 columns, partitioned alike",
             "lakelog_s": t_ll, "delta_s": parted}]


def _rows_in(sink: str) -> int:
    """Rows of the sink's latest version, read with delta-rs (0 before its first commit)."""
    try:
        return RsTable(sink).to_pyarrow_dataset().count_rows()
    except Exception:  # no commit yet
        return 0


def latency(spark, root: str, work: Path, runs: int) -> dict:
    """A running stream (processing-time trigger, no wait between batches) into a Delta sink:
    from the start of a 100-record produce until the sink's latest version holds them; beside
    it, the same from a raw 100-row Delta append through ``readStream.format("delta")``."""
    topic = "bench-latency"
    TopicAdmin(spark, root).create(topic, 8)
    producer = Producer(spark, root, topic, "lat", ProducerSettings())
    lakelog = _visible(spark, work / "lat", runs, lambda i: producer.send(rows(spark, 100, start=i * 100)),
                       spark.readStream.format(READS).option("root", root).option("subscribe", topic)
                       .option("startingOffsets", "earliest"), "latency")
    raw_table = str(work / "lat-raw-table")
    rows(spark, 0).write.format("delta").save(raw_table)
    raw = _visible(spark, work / "lat-raw", runs,
                   lambda i: rows(spark, 100, start=i * 100).write.format("delta").mode("append").save(raw_table),
                   spark.readStream.format("delta"), "latency raw", raw_table)
    return {"case": "100-record produce to visible in a running stream's sink", **lakelog,
            "raw": raw, "runs": runs}


def _visible(spark, work: Path, runs: int, produce, reader, case: str, load: str | None = None) -> dict:
    """p50 / p95 of ``produce(i)`` until a running stream of ``reader`` has it in its Delta sink,
    with the median split of Spark's triggers (``durationMs``) with and without rows."""
    sink = str(work / "sink")
    query = ((reader.load(load) if load else reader.load()).writeStream.format("delta")
             .option("checkpointLocation", str(work / "ck")).trigger(processingTime="0 seconds").start(sink))
    seen, produce_s, visible = 0, [], []
    window = PROFILE.window(case) if PROFILE is not None else None
    try:
        if window:
            window.__enter__()
        for i in range(runs):
            start = time.perf_counter()
            produce(i)
            produce_s.append(time.perf_counter() - start)
            seen += 100
            while _rows_in(sink) < seen:
                time.sleep(0.02)
            visible.append(time.perf_counter() - start)
    finally:
        if window:
            window.__exit__(None, None, None)
        progress = [p.get("durationMs", {}) for p in query.recentProgress if p.get("numInputRows", 0)]
        query.stop()
    q = statistics.quantiles(visible, n=20)
    return {"p50_s": statistics.median(visible), "p95_s": q[18], "produce_p50_s": statistics.median(produce_s),
            "trigger_ms_with_rows": _median_split(progress)}


def _median_split(durations: list[dict]) -> dict[str, float]:
    """The median of each part of Spark's trigger durations (``durationMs`` of query progress)."""
    keys = sorted({k for d in durations for k in d})
    return {k: statistics.median([d.get(k, 0) for d in durations]) for k in keys} if durations else {}


def small_produces(spark, root: str, work: Path, runs: int) -> list[dict]:
    """A 100-record produce from five origins (two with a ``sequence`` column) against a raw
    100-row Delta append of local rows, alternated run by run after a warm-up: p50 of each (16
    partitions)."""
    topic = "bench-small"
    TopicAdmin(spark, root).create(topic, 16)
    big = spark.range(500_000).select("id", F.concat(F.lit("key-"), (F.col("id") % 10_000).cast("string")).alias("key"),
                                      F.rpad(F.col("id").cast("string"), 100, "x").alias("value")).persist()
    big.count()
    path = str(work / "small.parquet")
    rows(spark, 100).write.parquet(path)
    local = rows(spark, 100).toPandas()
    raw = str(work / "raw-small")
    origins = {
        "local rows": lambda i: spark.createDataFrame(local),
        "a filter of a cached 500k-row frame": lambda i: big.where((F.col("id") >= i * 100) & (F.col("id") < i * 100 + 100))
                                                             .select("key", "value"),
        "a file read": lambda i: spark.read.parquet(path),
        "local rows with a sequence column": lambda i: spark.createDataFrame(local.assign(sequence=range(i * 100, i * 100 + 100))),
        "a filter of a cached 500k-row frame with a sequence column":
            lambda i: big.where((F.col("id") >= i * 100) & (F.col("id") < i * 100 + 100))
                         .select("key", "value", F.col("id").alias("sequence")),
    }
    # a producer id each: sequences are positions in one input stream
    producers = {name: Producer(spark, root, topic, f"small-{n}", ProducerSettings()) for n, name in enumerate(origins)}
    times: dict[str, list[float]] = {name: [] for name in [*origins, "raw"]}
    for i in range(runs + 5):  # the first five warm up
        for name, make in origins.items():
            df = make(i)
            elapsed = timed(lambda: producers[name].send(df), f"small from {name}" if i >= 5 else None)
            if i >= 5:
                times[name].append(elapsed)
        raw_df = spark.createDataFrame(local)
        elapsed = timed(lambda: raw_df.write.format("delta").mode("append").save(raw), "small raw" if i >= 5 else None)
        if i >= 5:
            times["raw"].append(elapsed)
    big.unpersist()
    raw_p50 = statistics.median(times["raw"])
    return [{"case": f"100-record produce from {name}", "lakelog_p50_s": statistics.median(times[name]),
             "raw_p50_s": raw_p50, "runs": runs} for name in origins]


def open_session(stack: contextlib.ExitStack, kind: str, source: str, root: str, conf: dict[str, str]):
    """The session the cases run on, with format("lakelog") (and ``READS``, ``WRITES``) set up: a
    classic one in this process, or a Connect client of a local server started (and stopped by
    ``stack``) for the run."""
    global READS, WRITES
    if kind == "connect":
        server = stack.enter_context(ConnectServer())
        console.print(f"Spark Connect server at {server.url} (started in {server.started_in:.0f} s)")
        spark = build_session(SparkSettings(remote=server.url, conf=conf))
        python_source.register(spark, root)  # "lakelog" is free there: the server has no lakelog jar
        return spark
    spark = build_session(SparkSettings(conf=conf))
    register(spark, root)
    if source == "python":
        python_source.register(spark, root, PYTHON_NAME)
        READS = WRITES = PYTHON_NAME
    return spark


def run_cases(spark, root: str, work: Path, args, cases: list[str]):
    """The warm-up, then the cases asked for: (bulk results, latency, small produces). Stops ``spark``."""
    results, lat, small = [], None, []
    try:
        console.print("warming up (not timed) ...")
        bulk_cases(spark, str(work / "warm"), work / "warm-data", 20_000, 2)
        if PROFILE is not None:
            PROFILE.windows.clear()
        for p in [int(x) for x in args.partitions.split(",")] if {"stream", "batch", "write"} & set(cases) else []:
            console.print(f"{args.records:,} records, {p} partitions ...")
            results += bulk_cases(spark, root, work, args.records, p, cases)
            console.print(results[-3:])
        if "latency" in cases:
            lat = latency(spark, root, work, args.latency_runs)
            console.print(lat)
        if "small" in cases:
            small = small_produces(spark, root, work, args.small_runs)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results, lat, small


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="8,64")
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--small-runs", type=int, default=20)
    parser.add_argument("--cases", default=",".join(ALL_CASES), help=f"some of {','.join(ALL_CASES)}")
    parser.add_argument("--profile", help="a folder for where the time went (event log, bridge calls, cProfile)")
    parser.add_argument("--source", choices=("jvm", "python"),
                        help="the source reads and writes go through: lakelog's JVM source and sink (a classic "
                             "session's default) or its Python data source (a Connect session's only one)")
    parser.add_argument("--session", choices=("classic", "connect"), default="classic",
                        help="a classic session in this process, or a Spark Connect session on a local server "
                             "without lakelog's jar (format('lakelog') is then the Python data source)")
    parser.add_argument("--json-out", help="where to write the figures (default: benchmarks/out/spark_format-<time>.json)")
    args = parser.parse_args()
    if args.session == "connect" and args.source == "jvm":
        parser.error("--session connect has no JVM source (the server has no lakelog jar): "
                     "its format('lakelog') is the Python source; give --source python or no --source")
    args.source = args.source or ("python" if args.session == "connect" else "jvm")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(ALL_CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: give some of {', '.join(ALL_CASES)}")
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-spark-"))
    root = str(work / "root")
    extra = {}
    global PROFILE
    if args.profile:
        PROFILE = Profile(Path(args.profile))
        PROFILE.wrap_side(FormatSide)
        extra = event_log_conf(Path(args.profile)) if args.session == "classic" else {}
    with contextlib.ExitStack() as stack:
        spark = open_session(stack, args.session, args.source, root, extra)
        results, lat, small = run_cases(spark, root, work, args, cases)
    if PROFILE is not None:
        console.print(f"profile: {PROFILE.write()}")
    table = Table(title="format('lakelog') against Spark's Delta source and sink (ratio: Delta time / lakelog time)")
    for col in ("case", "lakelog s", "Delta s", "ratio"):
        table.add_column(col)
    for r in results:
        table.add_row(r["case"], f"{r['lakelog_s']:.2f}", f"{r['delta_s']:.2f}", f"{r['ratio']:.2f}")
    if lat:
        raw = lat["raw"]
        table.add_row(lat["case"], f"p50 {lat['p50_s']:.2f} / p95 {lat['p95_s']:.2f} (produce p50 {lat['produce_p50_s']:.2f})",
                      f"raw append to format('delta') stream p50 {raw['p50_s']:.2f} / p95 {raw['p95_s']:.2f} "
                      f"(append p50 {raw['produce_p50_s']:.2f})", f"{lat['p50_s'] / raw['p50_s']:.2f}x raw")
    for r in small:
        table.add_row(r["case"], f"p50 {r['lakelog_p50_s']:.3f}", f"raw append p50 {r['raw_p50_s']:.3f}",
                      f"{r['lakelog_p50_s'] / r['raw_p50_s']:.2f}x raw")
    Console().print(table)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    Path(args.json_out or out / f"spark_format-{stamp}.json").write_text(json.dumps(
        {"machine": platform.platform(), "cpus": os.cpu_count(), "records": args.records, "load": os.getloadavg(),
         "source": args.source, "session": args.session,
         "results": results, "latency": lat, "small_produces": small}, indent=2))


if __name__ == "__main__":
    main()
