"""``lakelog replicate``: copy a replicated topic's leader log to its followers (a scheduled job, or
``--follow`` to keep copying), moving the in-sync set as followers fall behind or catch up."""

from __future__ import annotations

import time

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stderr


@click.command("replicate")
@click.option("--topic", required=True)
@click.option("--follow", is_flag=True, help="Keep copying, one round every replication.interval_seconds, until stopped.")
@click.option("--rounds", type=int, default=None, help="With --follow: stop after this many rounds.")
@json_option
@pass_ctx
def replicate(c: Context, topic: str, follow: bool, rounds: int | None, as_json: bool) -> None:
    """Copy TOPIC's new records from its leader root to every follower root, in offset order
    (resumable and idempotent: a killed run re-run copies nothing twice and skips nothing)."""
    c.config
    replication = c.replication()
    done = 0
    while True:
        started = time.monotonic()
        report = replication.replicate(topic, following=follow)
        done += 1
        rows = [{"root": f.root, "copied": f.copied, "lag": f.lag, "in_sync": f.in_sync,
                 "truncated": f.truncated or "", "error": f.error or ""} for f in report.followers]
        if as_json:
            emit(report.model_dump(mode="json"), True)
        else:
            emit(rows, False, f"{topic}: leader {report.leader}, epoch {report.leader_epoch}, "
                              f"high watermark {sum(report.high_watermark.values())} of {sum(report.leader_log_ends.values())} records")
        if not follow or (rounds is not None and done >= rounds):
            return
        pause = c.config.replication.interval_seconds - (time.monotonic() - started)
        if pause > 0:
            if not as_json:
                stderr.print(f"next round in {pause:.1f} s (Ctrl-C stops)", highlight=False, markup=False)
            time.sleep(pause)
