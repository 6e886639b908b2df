"""``lakelog controller tick``: the controller's periodic work (retirements, interrupted changes,
retention and compaction)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit


@click.group("controller")
def controller() -> None:
    """The topic controller's periodic work."""


@controller.command("tick")
@click.option("--topic", default=None, help="Only this topic (default: every topic).")
@click.option("--delete-delay", type=float, default=None,
              help="Seconds after marking when a partition is retired even if not drained "
                   "(default: controller.delete_delay_seconds).")
@json_option
@pass_ctx
def tick(c: Context, topic: str | None, delete_delay: float | None, as_json: bool) -> None:
    """Finish interrupted changes, retire drained or expired marked partitions, delete their rows,
    apply each topic's retention (retention.ms, retention.bytes) and merge small files; finish
    transactions whose decision was recorded and whose markers were not all written.

    Starts no JVM, except to rewrite the files an arrival-layout log's retired partitions share with
    others (a Spark job: starts a JVM)."""
    c.config
    from log_store.errors import StorageError

    from jobs.commands.transactions import coordinator_for

    results = c.controller().tick(topic, delete_delay)
    rows = [r.model_dump(mode="json") for r in results]
    if not as_json and not any(r["expired_for"] for r in rows):  # a column in a terminal's width only when it says something
        rows = [{k: v for k, v in r.items() if k != "expired_for"} for r in rows]
    emit(rows if as_json else [_readable(r) for r in rows], as_json, "controller tick")
    # transactions decided and left unfinished (their producer died after the decision) are finished
    finished = coordinator_for(c).tick() if topic is None else []
    if finished and not as_json:
        emit([{"transactional_id": r.transactional_id, "state": r.state.value} for r in finished], False,
             "transactions finished")
    failed = [r for r in results if r.error]
    if failed:  # the others were ticked; the job still fails, so a lost root is noticed
        raise StorageError(f"{len(failed)} topic(s) could not be ticked, the others were: " + "; ".join(
            f"'{r.topic}': {r.error}" for r in failed) + ". `lakelog topics describe --topic T` says what to do "
            "(for a replicated topic, the election to run)")


def _readable(row: dict) -> dict:
    """A tick's row for the table: lists joined, log starts, file compactions and key cleanings in a few words each."""
    out = {}
    row = dict(row)
    # key compaction shares the file compaction's column: one column fewer in a terminal's width
    row["compacted"] = row.get("compacted", []) + row.pop("cleaned", [])
    for key, value in row.items():
        if key == "log_starts":
            value = [f"{c['partition']}: {c['previous']}->{c['log_start']}" for c in value]
        elif key == "expired_for":
            value = [f"{group}: {n}" for group, n in value.items()]
        elif key == "compacted":
            value = [f"{c['partition']}: {c['records_before']}->{c['records_after']} records" if "records_before" in c
                     else f"{c['partition']}: {c['files_before']}->{c['files_after']} files" for c in value]
        out[key] = ", ".join(map(str, value)) if isinstance(value, list) else value
    return out
