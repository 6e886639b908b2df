"""A Spark job's rows as data files of a Delta table, written by Spark's tasks with pyarrow and
committed by the driver's transaction (``rs_engine.RsTransaction.write``): Spark stays the data
pipeline through its public API (``mapInArrow``), and the commit is delta-rs's, with no Delta
internals. Each task writes its rows as Delta's writer would lay them out (``arrow_files``: fit to
the table's schema, a file per value of the partition column, Delta's statistics) and hands back
one add action a file; a file is not part of the table until the driver commits it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame

from log_store.delta_errors import translate

# Computes an add action's tags from the rows of its file, in the task that writes it.
TagsOf = Callable[[pa.Table], dict[str, str]]
ADD_SCHEMA = "add string"


def write_frame(data: DataFrame, path: str, schema_json: str, partition_by: str | None,
                stats: frozenset[str] | None, data_change: bool, tags_of: TagsOf | None = None,
                storage: Mapping[str, str] | None = None) -> list[dict]:
    """Write ``data``'s rows as Parquet files in the table at ``path`` (one Spark job; each task
    its own files); return their add actions, for the caller's transaction to commit."""
    storage = dict(storage) if storage else None

    def write_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_task(batches, path, schema_json, partition_by, stats, data_change, tags_of, storage)

    try:
        rows = data.mapInArrow(write_task, ADD_SCHEMA).collect()
    except Exception as exc:
        raise translate(exc) from exc
    return [json.loads(row["add"]) for row in rows]


def _write_task(batches: Iterator[pa.RecordBatch], path: str, schema_json: str, partition_by: str | None,
                stats: frozenset[str] | None, data_change: bool, tags_of: TagsOf | None,
                storage: dict[str, str] | None) -> Iterator[pa.RecordBatch]:
    """One task's rows as files in their partitions' folders; yields their add actions (JSON)."""
    from log_store.arrow_files import arrow_schema, fit_rows, parquet_files, split_by
    from log_store.files import is_remote, write_file
    from log_store.object_store import arrow_filesystem

    got = [b for b in batches if b.num_rows]
    if not got:
        return
    schema, required = arrow_schema(schema_json)
    rows = fit_rows(pa.Table.from_batches(got), schema, required, path)
    adds = []
    fs, root = (None, path) if not is_remote(path) else arrow_filesystem(path, storage)
    for part in split_by(rows, partition_by):
        for data, add, _written in parquet_files([part], stats, data_change, tags_of(part[1]) if tags_of else None):
            if fs is None:
                write_file(None, f"{root}/{add['path']}", data, in_table=True)
            else:
                with fs.open_output_stream(f"{root}/{add['path']}") as out:
                    out.write(data)
            adds.append(json.dumps(add))
    yield pa.RecordBatch.from_pydict({"add": adds})
