"""``lakelog controller tick``: the controller's periodic work (retirements, interrupted changes)."""

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
    """Finish interrupted changes, retire drained or expired marked partitions, delete their rows."""
    c.config
    results = c.controller().tick(topic, delete_delay)
    rows = [r.model_dump(mode="json") for r in results]
    emit(rows if as_json else [{k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()}
                               for r in rows], as_json, "controller tick")
