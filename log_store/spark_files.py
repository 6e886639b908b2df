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
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType

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
    data, nested = _without_null_nests(data)

    def write_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_task(batches, path, schema_json, partition_by, stats, data_change, tags_of, storage, nested)

    try:
        rows = data.mapInArrow(write_task, ADD_SCHEMA).collect()
    except Exception as exc:
        raise translate(exc) from exc
    return [json.loads(row["add"]) for row in rows]


NULL_MARK = "_lakelog_null_"  # a nested column's null marks while its rows cross to Python


def _without_null_nests(data: DataFrame) -> tuple[DataFrame, list[str]]:
    """``data`` with each array or map column's nulls crossing as empty values and a mark of its
    own: Spark's Arrow writer takes about 4 µs a row for a null array (a produce without headers:
    2 s of 500,000 rows), a few hundred ns for an empty one. ``_with_null_nests`` puts them back."""
    nested = [f for f in data.schema.fields if isinstance(f.dataType, (ArrayType, MapType))]
    for f in nested:
        empty = (F.array() if isinstance(f.dataType, ArrayType) else F.create_map()).cast(f.dataType)
        data = data.withColumn(NULL_MARK + f.name, F.col(f.name).isNull()) \
                   .withColumn(f.name, F.coalesce(F.col(f.name), empty))
    return data, [f.name for f in nested]


def _with_null_nests(rows: pa.Table, nested: list[str]) -> pa.Table:
    import pyarrow.compute as pc

    for name in nested:
        mark = rows.column(NULL_MARK + name)
        column = rows.column(name)
        if pc.any(mark).as_py():
            column = pc.if_else(mark, pa.nulls(len(column), column.type), column)
        rows = rows.set_column(rows.schema.get_field_index(name), name, column).drop_columns([NULL_MARK + name])
    return rows


def _write_task(batches: Iterator[pa.RecordBatch], path: str, schema_json: str, partition_by: str | None,
                stats: frozenset[str] | None, data_change: bool, tags_of: TagsOf | None,
                storage: dict[str, str] | None, nested: list[str]) -> Iterator[pa.RecordBatch]:
    """One task's rows as files in their partitions' folders; yields their add actions (JSON)."""
    from log_store.arrow_files import arrow_schema, fit_rows, parquet_files, split_by
    from log_store.files import is_remote, write_file
    from log_store.object_store import arrow_filesystem

    got = [b for b in batches if b.num_rows]
    if not got:
        return
    schema, required = arrow_schema(schema_json)
    rows = fit_rows(_with_null_nests(pa.Table.from_batches(got), nested), schema, required, path)
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
