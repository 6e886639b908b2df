"""Controller time for growing a topic, against the bare ALTER TABLE that sets the same metadata.

    .venv/bin/python benchmarks/controller.py [--cases 8:16,64:128] [--repeats 3]

For each case, ``TopicController.alter`` grows fresh topics (median of the repeats) and, for
comparison, a raw ``ALTER TABLE ... SET TBLPROPERTIES`` sets the same log metadata on a table of
the same size. The controller's time is split into its steps: the record compare-and-set (a
table property raised in the commit of the record's row), the log metadata commit, and the rest
(reads of the latest record and the log snapshot). Prints a table; writes JSON to benchmarks/out/controller.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from produce_consume import timed  # noqa: E402  (the script directory is on sys.path)
from control_plane.controller import TopicController  # noqa: E402
from control_plane.controller.rules import log_metadata, plan_expand  # noqa: E402
from control_plane.records import utcnow  # noqa: E402
from control_plane.topics import TopicAdmin  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402
from log_store.topic_log import TopicLog  # noqa: E402

console = Console(stderr=True)


def instrument(ctl: object, name: str, spent: dict[str, float]) -> None:
    """Accumulate the time spent in one of the controller's steps."""
    inner = getattr(ctl, name)

    def wrapper(*args, **kwargs):
        t, out = timed(lambda: inner(*args, **kwargs))
        spent[name] = spent.get(name, 0.0) + t
        return out

    setattr(ctl, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="8:16,64:128")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cases = [tuple(int(x) for x in c.split(":")) for c in args.cases.split(",")]

    spark = build_session(SparkSettings())
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-ctl-"))
    rows: list[dict] = []
    try:
        root = str(work / "root")
        admin = TopicAdmin(spark, root)
        ctl = TopicController(spark, root)
        admin.create("warmup", 2)
        ctl.alter("warmup", 3)  # JIT and Delta code paths warm before timing
        for n, m in cases:
            ctl_times, raw_times, steps = [], [], []
            for r in range(args.repeats):
                topic = f"grow{n}-{r}"
                record = admin.create(topic, n)
                spent: dict[str, float] = {}
                probe = TopicController(spark, root)
                instrument(probe.changes, "record", spent)
                instrument(probe.changes, "apply", spent)
                t, result = timed(lambda: probe.alter(topic, m))
                assert result.undeleted_partition_count == m
                ctl_times.append(t)
                steps.append(spent)
                # the same metadata, set raw on a table of the same size
                raw = TopicLog.create(spark, str(work / f"raw{n}-{r}"), log_metadata(record))
                wanted = log_metadata(plan_expand(record, m, utcnow())).model_copy(update={"topic": record.topic})
                t_raw, _ = timed(lambda: raw.set_metadata(wanted))
                assert raw.metadata().partitions == wanted.partitions
                raw_times.append(t_raw)
            t_ctl, t_raw = statistics.median(ctl_times), statistics.median(raw_times)
            cas = statistics.median(s["record"] for s in steps)
            commit = statistics.median(s["apply"] for s in steps)
            rows.append({
                "case": f"grow {n} -> {m} partitions", "controller_s": t_ctl, "raw_alter_s": t_raw,
                "ratio": t_ctl / t_raw, "record_cas_s": cas, "log_commit_s": commit,
                "reads_s": t_ctl - cas - commit, "repeats": args.repeats,
            })
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = Table(title="controller vs raw ALTER TABLE (median seconds; ratio = controller / raw)")
    for col in ("case", "controller_s", "raw_alter_s", "ratio", "record_cas_s", "log_commit_s", "reads_s"):
        table.add_column(col)
    for row in rows:
        table.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for k, v in row.items() if k != "repeats"))
    Console(width=140).print(table)
    out = Path(__file__).resolve().parent / "out" / "controller.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "when": datetime.now(timezone.utc).isoformat(), "host": platform.node(), "python": platform.python_version(),
        "rows": rows,
    }, indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
