"""``lakelog replicate``: copy a replicated topic's leader log to its followers (a scheduled job, or
``--follow`` to keep copying), moving the in-sync set as followers fall behind or catch up."""

from __future__ import annotations

import time

import click

from jobs.context import Context, json_option, pass_ctx
from log_store.errors import InvalidConfigurationError, LakelogError, UnknownTopicError
from jobs.output import emit, stderr


@click.command("replicate")
@click.option("--topic", required=True)
@click.option("--follow", is_flag=True, help="Keep copying, one round every replication.interval_seconds, until stopped.")
@click.option("--rounds", type=int, default=None, help="With --follow: stop after this many rounds.")
@click.option("--recreate", "recreate", multiple=True, metavar="ROOT",
              help="Make the log of this follower root again, empty, and copy it whole (its log was lost).")
@json_option
@pass_ctx
def replicate(c: Context, topic: str, follow: bool, rounds: int | None, recreate: tuple[str, ...], as_json: bool) -> None:
    """Copy TOPIC's new records from its leader root to every follower root, in offset order
    (resumable and idempotent: a killed run re-run copies nothing twice and skips nothing). With
    --follow, a round that fails (the leader's root lost, an election under way) is said and the
    next round follows the topic to its leader."""
    c.config
    replication = c.replication()
    done = 0
    while True:
        started = time.monotonic()
        try:
            report = replication.replicate(topic, following=follow, recreate=list(recreate))
        except LakelogError as exc:
            if not follow or isinstance(exc, (UnknownTopicError, InvalidConfigurationError)):
                raise
            done += 1
            stderr.print(f"round {done}: {exc}", highlight=False, markup=False)
            if rounds is not None and done >= rounds:
                raise
            time.sleep(c.config.replication.interval_seconds)
            continue
        done += 1
        rows = [{"root": f.root, "copied": f.copied, "lag": f.lag, "in_sync": f.in_sync, "joining": f.joining,
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
