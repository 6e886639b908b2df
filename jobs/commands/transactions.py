"""``lakelog transactions``: list, describe and abort transactional ids (Kafka's ``kafka-transactions.sh``)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit


@click.group()
def transactions() -> None:
    """Inspect and abort transactions (the ``transactions`` control table)."""


def coordinator_for(c: Context):
    """The root's coordinator, with the configuration's windows for its table (`serve` settings)."""
    from control_plane.transactions.coordinator import TransactionCoordinator

    serve = c.config.serve  # the table's windows (its compaction) are the server's settings
    return TransactionCoordinator(c.spark, c.root, history_retention_ms=serve.transaction_history_retention_ms,
                                  id_expiration_ms=serve.transactional_id_expiration_ms)


def _summary(row) -> dict:
    """One id's latest row, for the list and the describe."""
    return {"transactional_id": row.transactional_id, "producer_id": row.producer_id, "epoch": row.epoch,
            "state": row.state.value, "timeout_ms": row.timeout_ms,
            "partitions": ", ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(row.partitions.items())),
            "group": row.group, "changed_at": row.changed_at, "version": row.version}


@transactions.command("list")
@json_option
@pass_ctx
def list_(c: Context, as_json: bool) -> None:
    """Every transactional id under the root with its producer id, epoch and state."""
    rows = sorted(coordinator_for(c).table.latest().values(), key=lambda r: r.transactional_id)
    emit([_summary(r) for r in rows], as_json, "transactions")


@transactions.command("describe")
@click.option("--transactional-id", "transactional_id", required=True)
@json_option
@pass_ctx
def describe(c: Context, transactional_id: str, as_json: bool) -> None:
    """One id's state: producer id, epoch, state, the partitions and group of its transaction, the
    group's positions pending in it, the producer id and epoch of the transaction last decided (the
    producer id differs once an exhausted epoch moved the id to a new one), and the row's versions."""
    from control_plane.transactions.state import UnknownTransactionalIdError

    history = coordinator_for(c).table.history(transactional_id)
    if not history:
        raise UnknownTransactionalIdError(f"unknown transactional id '{transactional_id}' under {c.root}: "
                                          "`lakelog transactions list` shows the known ones")
    row = history[-1]
    out = {**_summary(row), "ended_epoch": row.ended_epoch, "ended_producer_id": row.ended_by,
           "pending_positions": [{"topic": t, "partition": p, "offset": o}
                                 for t, ps in sorted(row.positions.items()) for p, o in sorted(ps.items())]}
    if as_json:
        emit({**out, "partitions": row.partitions, "history": [
            {"version": r.version, "producer_id": r.producer_id, "epoch": r.epoch, "state": r.state.value,
             "changed_at": r.changed_at}
            for r in history]}, True)
        return
    emit({**out, "pending_positions": ", ".join(f"{p['topic']}:{p['partition']}={p['offset']}"
                                                for p in out["pending_positions"])}, False,
         f"transactional id {transactional_id}")


@transactions.command("abort")
@click.option("--transactional-id", "transactional_id", required=True)
@json_option
@pass_ctx
def abort(c: Context, transactional_id: str, as_json: bool) -> None:
    """Abort the id's open transaction (a hung one), or finish its decided one: abort markers to
    its partitions, the epoch raised, so its producer is fenced. Refused when nothing is open."""
    row = coordinator_for(c).abort(transactional_id)
    emit(_summary(row), as_json, f"transactional id {transactional_id}")


@transactions.command("watch")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between two looks at every transactional id.")
@click.option("--for", "run_for", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds (default: until interrupted).")
@json_option
@pass_ctx
def watch(c: Context, interval: float, run_for: float | None, as_json: bool) -> None:
    """The transaction timeout's observer, for roots no `lakelog serve` watches: abort every
    transaction seen unchanged past its `transaction.timeout.ms` (by this process's own clock, from
    when it first saw it), and finish decided ones, so read_committed readers never wait longer.
    Prints each transaction it moved."""
    import json
    import time

    coordinator = coordinator_for(c)
    stop = None if run_for is None else time.monotonic() + run_for
    try:
        while stop is None or time.monotonic() < stop:
            for row in coordinator.tick():
                if as_json:  # one JSON object per line, as it happens
                    click.echo(json.dumps(_summary(row), default=str))
                else:
                    emit(_summary(row), False, f"transactional id {row.transactional_id}")
            time.sleep(interval if stop is None else max(0.0, min(interval, stop - time.monotonic())))
    except KeyboardInterrupt:
        pass
