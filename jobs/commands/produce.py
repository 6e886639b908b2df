"""``lakelog produce``: an input file's records to a topic (idempotent per producer id)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx, progress_bar
from jobs.output import emit


@click.command()
@click.option("--topic", required=True)
@click.option("--input", "input_path", required=True, help="JSON Lines (.jsonl) or Parquet file.")
@click.option("--producer-id", default=None, help="Names the input stream; re-running with it resumes without duplicates.")
@click.option("--sequence-start", default=0, type=click.IntRange(min=0), help="Sequence of the first record (to continue a stream).")
@json_option
@pass_ctx
def produce(c: Context, topic: str, input_path: str, producer_id: str | None, sequence_start: int, as_json: bool) -> None:
    """Produce the records of an input file to TOPIC. A local file of up to 20,000 records is
    produced without a JVM; a larger or remote one is read by a Spark job (starts a JVM)."""
    from log_store.dense_offsets import ONE_TASK_ROWS
    from pipelines.inputs import read_input, read_local_input
    from pipelines.producer import Producer

    c.config
    producer = Producer(c.spark, c.root, topic, producer_id, c.config.producer, c.config.replication)
    records = read_local_input(input_path, ONE_TASK_ROWS)  # a small local file: no JVM
    if records is None:
        records = read_input(c.spark, input_path)
    with progress_bar("producing batches") as bar:
        task = bar.add_task("produce", total=None)
        result = producer.send(records, sequence_start, lambda done, total: bar.update(task, completed=done, total=total))
    emit(result.model_dump(), as_json, "produced")
