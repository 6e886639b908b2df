"""Every throughput aim in one run: raw Delta, lakelog and a local Kafka broker side by side.

    .venv/bin/python benchmarks/all.py [--records 1000000] [--kafka-records 500000]

Runs, one after another so that only one of them uses the machine at a time:

1. ``produce_consume.py``: produce and consume 1M records into 8 and 64 partitions against a raw
   Delta append and read of the same rows, and 100-record produces against 100-row appends;
2. ``spark_format.py``: ``write.format("lakelog")`` and ``readStream.format("lakelog")`` against
   Spark's Delta sink and source, at 8 and 64 partitions;
3. the Kafka window: lakelog and raw Delta on 500k records of about 120 bytes into 16 partitions,
   then one Kafka KRaft broker (``kafka_broker.py``) on the same records' size and count.

Prints one table of every aim (figure, yardstick, ratio, aim, met) and writes it with the
machine and load to ``benchmarks/out/all-<time>.json``; BENCHMARKS.md records it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.kafka_broker import Broker  # noqa: E402

console = Console(stderr=True)
KAFKA_RECORD_BYTES = 120
# A lakelog record of about Kafka's 120 bytes: a key of "key-NNNN" (8) and a value of 112.
KAFKA_VALUE_BYTES = KAFKA_RECORD_BYTES - 8


def _run(script: str, *args: str, out: Path) -> dict:
    """Run one benchmark script in its own process (its own Spark), its figures from ``out``."""
    console.rule(f"{script} {' '.join(args)}")
    started = time.monotonic()
    subprocess.run([sys.executable, str(HERE / script), *args, "--json-out", str(out)], check=True)
    console.print(f"{script}: {time.monotonic() - started:.0f} s")
    return json.loads(out.read_text())


def _case(rows: list[dict], prefix: str) -> dict:
    found = [r for r in rows if r["case"].startswith(prefix)]
    if not found:
        raise SystemExit(f"no case starting {prefix!r} in the figures: did a benchmark change its case names?")
    return found[0]


def aims(produce: dict, spark: dict, window: dict, kafka: dict, records: int, kafka_records: int) -> list[dict]:
    """The aims' rows: (what, lakelog's figure, the yardstick's, ratio, aim, met)."""
    pc, sf = produce["results"], spark["results"]
    out = []

    def ratio_row(what: str, ll_s: float, ref_s: float, aim: float, ref: str) -> None:
        ratio = ref_s / ll_s
        out.append({"case": what, "lakelog": f"{ll_s:.2f} s", "yardstick": f"{ref_s:.2f} s ({ref})",
                    "ratio": ratio, "aim": f">= {aim}", "met": ratio >= aim})

    for p in (8, 64):
        r = _case(pc, f"produce {records:,} -> {p} partitions")
        ratio_row(f"produce {records:,} into {p} partitions", r["lakelog_s"], r["raw_s"], 0.8, "raw append")
    for p in (8, 64):
        r = _case(sf, f"write 1 x {records:,} -> {p}")
        ratio_row(f'write.format("lakelog") {records:,} into {p}', r["lakelog_s"], r["delta_s"], 0.8, 'format("delta")')
    for p in (8, 64):
        r = _case(sf, f"stream {records:,} <- {p}")
        ratio_row(f'readStream.format("lakelog") {records:,} from {p}, AvailableNow', r["lakelog_s"], r["delta_s"], 0.8,
                  'readStream.format("delta")')
    for p in (8, 64):
        r = _case(pc, f"consume {records:,} from {p} partitions")
        ratio_row(f"consume {records:,} from {p} to a handler", r["lakelog_s"], r["raw_s"], 0.9, "raw read")
    p50 = [r for r in pc if "p50" in r["case"]]
    if p50:
        r = p50[0]
        out.append({"case": r["case"].replace(": p50 latency", " p50"), "lakelog": f"{r['lakelog_s'] * 1000:.0f} ms",
                    "yardstick": f"{r['raw_s'] * 1000:.0f} ms (raw append)", "ratio": r["ratio"], "aim": "<= 1.5x",
                    "met": r["ratio"] <= 1.5})
    wp = _case(window["results"], f"produce {kafka_records:,} -> 16 partitions")
    wc = _case(window["results"], f"consume {kafka_records:,} from 16 partitions")
    for what, ll_rate, raw_rate, k_rate in (
        ("produce", kafka_records / wp["lakelog_s"], kafka_records / wp["raw_s"], kafka["produce_rec_s"]),
        ("consume", kafka_records / wc["lakelog_s"], kafka_records / wc["raw_s"], kafka["consume_rec_s"]),
    ):
        out.append({"case": f"{what} {kafka_records:,} x {KAFKA_RECORD_BYTES} B, 16 partitions: lakelog vs one Kafka broker",
                    "lakelog": f"{ll_rate / 1000:.0f}k rec/s", "yardstick": f"{k_rate / 1000:.0f}k rec/s (Kafka; raw Delta "
                    f"{raw_rate / 1000:.0f}k)", "ratio": ll_rate / k_rate, "aim": ">= 1.0", "met": ll_rate >= k_rate})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kafka-records", type=int, default=500_000)
    parser.add_argument("--small-produces", type=int, default=100)
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-all-") as work:
        w = Path(work)
        produce = _run("produce_consume.py", "--records", str(args.records), "--partitions", "8,64",
                       "--small-produces", str(args.small_produces), out=w / "produce.json")
        spark = _run("spark_format.py", "--records", str(args.records), "--partitions", "8,64", out=w / "spark.json")
        window = _run("produce_consume.py", "--records", str(args.kafka_records), "--partitions", "16",
                      "--value-bytes", str(KAFKA_VALUE_BYTES), "--small-produces", "0", out=w / "window.json")
    console.rule("one Kafka KRaft broker")
    with Broker() as broker:
        kafka = broker.measure(args.kafka_records, KAFKA_RECORD_BYTES, 16)
    console.print(kafka)
    rows = aims(produce, spark, window, kafka, args.records, args.kafka_records)
    table = Table(title=f"lakelog's aims, measured {started:%Y-%m-%d %H:%M} UTC on {platform.node()} "
                        f"({os.cpu_count()} cores, load before {load_before[0]:.2f})")
    for col in ("case", "lakelog", "yardstick", "ratio", "aim", "met"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["case"], r["lakelog"], r["yardstick"], f"{r['ratio']:.2f}", r["aim"], "yes" if r["met"] else "no")
    Console().print(table)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / f"all-{started:%Y%m%dT%H%M%SZ}.json").write_text(json.dumps(
        {"date": started.isoformat(), "machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load_before,
         "aims": rows, "produce_consume": produce, "spark_format": spark, "kafka_window": window, "kafka": kafka},
        indent=2))


if __name__ == "__main__":
    main()
