"""``python -m chaos.timeline chaos-runs/seed-N``: one run's story, in time order, for analysing an anomaly.

Merges what a kept run directory holds: topic changes (``control/topics``), group generations
(``control/group_generations``), ``offset_commits`` rows (one line per commit: kind, member,
partition:offset) and every actor's events (``logs/*.out``). Read with delta-rs, no Spark. The
times come from different processes' clocks on one machine: good for reading a story, never used
to judge one (the checker judges by commit order).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from chaos import checker_reads


def _utc(value) -> datetime | None:
    """Naive datetimes are UTC (how lakelog writes them); numbers are Unix seconds."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _parts(partitions) -> str:
    return " ".join(f"p{p['partition']}:{p['mode']}[{p.get('start_offset') or 0},"
                    f"{'' if p.get('end_offset') is None else int(p['end_offset'])})" for p in partitions or [])


def topic_events(root: Path) -> list[dict]:
    return [{"at": _utc(r.get("changed_at")), "who": r.get("changed_by") or "", "what": f"topic v{r['topic_version']} {r['event']}",
             "detail": _parts(r["partitions"])} for r in checker_reads.read_current(str(root / "control" / "topics"))]


def generation_events(root: Path) -> list[dict]:
    out = []
    for r in checker_reads.read_current(str(root / "control" / "group_generations")):
        owners = "; ".join(f"{a['member_id']}: {[p['partition'] for p in a['partitions']]}" for a in r.get("assignment") or [])
        marked = [m["partition"] for m in r.get("marked") or []]
        versions = dict(r.get("topic_versions") or [])
        out.append({"at": _utc(r.get("created_at")), "who": r.get("leader") or "",
                    "what": f"{r['group']} generation {r['generation']} ({r.get('reason') or ''})",
                    "detail": f"topic {versions} {owners}" + (f"; marked {marked}" if marked else "")
                              + (f"; expired {r['expired']}" if r.get("expired") else "")})
    return out


def commit_events(root: Path) -> list[dict]:
    by_commit: dict[tuple, list[dict]] = defaultdict(list)
    for r in checker_reads.read_changes(str(root / "control" / "offset_commits")):
        by_commit[(r["_commit_version"], r["group"], r["member_id"], r["kind"])].append(r)
    out = []
    for (version, group, member, kind), rows in sorted(by_commit.items(), key=lambda kv: kv[0][0]):
        detail = " ".join(f"p{r['partition']}:{r['offset']}" + (f"-{r['end_offset']}" if r.get("end_offset") is not None else "")
                          for r in sorted(rows, key=lambda r: r["partition"]) if r["partition"] >= 0)
        gen = rows[0].get("generation")
        out.append({"at": _utc(min(r["committed_at"] for r in rows if r.get("committed_at")) if any(r.get("committed_at") for r in rows) else None),
                    "who": member, "what": f"{group} {kind} (gen {gen}, v{version})", "detail": detail})
    return out


def actor_events(run: Path) -> list[dict]:
    out = []
    for path in sorted((run / "logs").glob("*.out")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(e, dict) or "at" not in e:
                continue
            rest = {k: v for k, v in e.items() if k not in ("at", "event")}
            out.append({"at": _utc(e["at"]), "who": path.stem, "what": e.get("event", ""),
                        "detail": json.dumps(rest, default=str)[:300]})
    return out


def timeline(run: Path) -> list[dict]:
    """Every event of the run, earliest first (events without a time last)."""
    root = run / "root"
    events = topic_events(root) + generation_events(root) + commit_events(root) + actor_events(run)
    far = datetime.max.replace(tzinfo=timezone.utc)
    return sorted(events, key=lambda e: e["at"] or far)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a kept run directory, e.g. chaos-runs/seed-152")
    parser.add_argument("--json", action="store_true", help="print JSON lines for scripts")
    parser.add_argument("--grep", default=None, help="only events whose text contains this")
    args = parser.parse_args(argv)
    run = Path(args.run)
    if not (run / "root").is_dir():
        raise SystemExit(f"error: {run} is not a campaign run directory (no root/ in it): pass chaos-runs/seed-N")
    events = [e for e in timeline(run)
              if not args.grep or args.grep in f"{e['who']} {e['what']} {e['detail']}"]
    if args.json:
        for e in events:
            print(json.dumps({**e, "at": e["at"].isoformat() if e["at"] else None}))
        return 0
    table = Table(title=f"{run}: {len(events)} events (UTC)")
    for column in ("at", "who", "what", "detail"):
        table.add_column(column, overflow="fold")
    for e in events:
        table.add_row(e["at"].strftime("%H:%M:%S.%f")[:-3] if e["at"] else "-", e["who"], e["what"], e["detail"])
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
