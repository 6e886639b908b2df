"""A fenced append's time as a topic's log grows, through each commit engine, in one run.

    .venv/bin/python benchmarks/commit_growth.py [COMMITS] [--partitions 16] [--records 160] [--json-out FILE]

``TopicLog.append_rows`` (what ``lakelog serve`` and small produces commit: rows already in the
driver, a file per partition, the fence read and moved in one commit) into a fresh local log,
COMMITS times (default 800), once with Spark's Delta engine (py4j, ``log_store.engine``) and once
with delta-rs's (``log_store.rs_engine``), chosen as ``log_store.commits`` would. Each commit adds
one file per partition, so the log holds PARTITIONS x n files after n commits, as a server's log
does between compactions. Prints the p50 and p99 of each window of 100 commits for both engines,
and their ratio (delta-rs / Spark's), so a cost that grows with the table shows as a rising row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from log_store import commits  # noqa: E402
from log_store.engine import DeltaTransaction  # noqa: E402
from log_store.log_metadata import TopicLogMetadata  # noqa: E402
from log_store.rs_engine import RsTransaction  # noqa: E402
from log_store.topic_log import TopicLog  # noqa: E402

WINDOW = 100
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def batch(partitions: int, records: int, first: int) -> pa.Table:
    """``records`` records of about 120 bytes over every partition, numbered from ``first``."""
    return pa.table({
        "partition": pa.array([i % partitions for i in range(records)], pa.int32()),
        "key": [f"key-{i % 1000}".encode() for i in range(records)],
        "value": [b"v" * 112] * records,
        "headers": pa.nulls(records, HEADERS),
        "timestamp": [datetime.now(timezone.utc)] * records,
        "producer_id": ["growth"] * records,
        "sequence": list(range(first, first + records)),
    })


def run(spark, engine: str, commits_n: int, partitions: int, records: int) -> list[float]:
    """Seconds of each of ``commits_n`` appends into a fresh log through ``engine``."""
    path = tempfile.mkdtemp(prefix=f"lakelog-growth-{engine}-") + "/log"
    log = TopicLog.create(spark, path, TopicLogMetadata.initial("growth", partitions))
    start = (lambda s, p, what="": DeltaTransaction.start(s, p)) if engine == "spark" else \
        (lambda s, p, what="": RsTransaction.start(p))
    commits.start, real = start, commits.start
    times, mark = [], -1
    try:
        for n in range(commits_n):
            rows = batch(partitions, records, mark + 1)
            began = time.perf_counter()
            result = log.append_rows(rows, partitions, {"growth": mark})
            times.append(time.perf_counter() - began)
            mark = result.producer_mark
            if (n + 1) % WINDOW == 0:
                w = sorted(times[-WINDOW:])
                print(f"{engine:6} {n + 1:6} commits: p50 {statistics.median(w) * 1000:7.1f} ms, "
                      f"p99 {w[int(len(w) * 0.99) - 1] * 1000:7.1f} ms", flush=True)
    finally:
        commits.start = real
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("commits", nargs="?", type=int, default=800)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--records", type=int, default=160)
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    from log_store.session import build_session
    from log_store.config import SparkSettings

    spark = build_session(SparkSettings())
    figures = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": os.getloadavg(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "partitions": args.partitions,
               "records_per_commit": args.records}
    runs = {engine: run(spark, engine, args.commits, args.partitions, args.records) for engine in ("spark", "delta-rs")}
    figures["load_after"] = os.getloadavg()
    print(f"{'commits':>8} {'files':>7} {'Spark p50':>10} {'delta-rs p50':>13} {'ratio':>6}")
    windows = []
    for end in range(WINDOW, args.commits + 1, WINDOW):
        s = statistics.median(runs["spark"][end - WINDOW:end]) * 1000
        r = statistics.median(runs["delta-rs"][end - WINDOW:end]) * 1000
        windows.append({"commits": end, "files": end * args.partitions, "spark_p50_ms": round(s, 1),
                        "delta_rs_p50_ms": round(r, 1)})
        print(f"{end:8} {end * args.partitions:7} {s:10.1f} {r:13.1f} {r / s:6.2f}")
    figures["windows"] = windows
    out = Path(args.json_out or Path(__file__).parent / "out" / f"commit_growth-{int(time.time())}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    print(f"figures: {out}")


if __name__ == "__main__":
    main()
