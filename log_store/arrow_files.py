"""What a Parquet file written outside Spark needs to join a Delta table as Delta's own writer
would leave it: the table's schema in Arrow's terms, rows made to fit it and split by the
partition column, and Delta's statistics of the file's rows."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from log_store.errors import InvalidRecordError, LakelogError

TAGS_KEY = "lakelog.tags"  # an add action's tags as delta-rs commits them: inside its statistics JSON


def with_tags(add: dict) -> dict:
    """An add action with the tags kept in its statistics (``TAGS_KEY``: ``AddAction`` of delta-rs
    has no tags) back in ``tags``, whichever engine committed it."""
    kept = json.loads(add.get("stats") or "{}").get(TAGS_KEY)
    return {**add, "tags": {**(add.get("tags") or {}), **kept}} if kept else add



@dataclass(frozen=True)
class WrittenFile:
    """What Delta recorded about one data file written in a transaction (for counting)."""

    partition_values: dict[str, str]
    num_records: int | None  # None when Delta collected no statistics
    min_values: dict
    max_values: dict
    path: str = ""  # relative to the table, as the add action names it
    add: dict | None = None  # the add action, where the caller adds it (``write(..., hold=True)``)


def written_file(add: dict, held: bool = False) -> WrittenFile:
    """What an add action (Delta's JSON) says of its file; ``held``: kept with it (``add``)."""
    stats = json.loads(add.get("stats") or "{}")
    return WrittenFile(partition_values={str(k): str(v) for k, v in (add.get("partitionValues") or {}).items()},
                       num_records=int(stats["numRecords"]) if "numRecords" in stats else None,
                       min_values=stats.get("minValues", {}), max_values=stats.get("maxValues", {}),
                       path=add["path"], add=add if held else None)


_ARROW_SCHEMAS: dict[str, tuple[pa.Schema, frozenset[str]]] = {}


def arrow_schema(schema_json: str) -> tuple[pa.Schema, frozenset[str]]:
    """A Delta table schema (its JSON) as Arrow's, and the names of its NOT NULL columns."""
    if schema_json not in _ARROW_SCHEMAS:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        struct = StructType.fromJson(json.loads(schema_json))
        # timestamps as UTC instants (Delta keeps them so; Parquet marks them adjusted to UTC)
        _ARROW_SCHEMAS[schema_json] = (to_arrow_schema(struct, timezone="UTC"), frozenset(f.name for f in struct.fields if not f.nullable))
    return _ARROW_SCHEMAS[schema_json]


STRING_PREFIX = 32  # Delta's dataSkippingStringPrefixLength: longer strings get no bounds here


def file_stats(rows: pa.Table, columns: frozenset[str] | None = None) -> dict:
    """Delta's file statistics for ``rows``: exact where given, absent (no skipping) where not.
    ``columns``: the table's ``delta.dataSkippingStatsColumns`` (None: every column), as Delta's
    writer keeps statistics for those only. Timestamps as Delta writes them: UTC, to the
    millisecond (its readers allow for the cut)."""
    low: dict = {}
    high: dict = {}
    nulls: dict = {}
    for name, column in zip(rows.column_names, rows.columns):
        kind = column.type
        if pa.types.is_nested(kind) or (columns is not None and name not in columns):
            continue
        nulls[name] = column.null_count
        if column.null_count == len(column):
            continue
        if pa.types.is_timestamp(kind):
            bounds = pc.min_max(column.cast(pa.timestamp("ms", tz="UTC"), safe=False))
            low[name], high[name] = (delta_time(bounds["min"].as_py()), delta_time(bounds["max"].as_py()))
        elif pa.types.is_integer(kind) or (pa.types.is_string(kind) and
                                           pc.max(pc.utf8_length(column)).as_py() <= STRING_PREFIX):
            bounds = pc.min_max(column)
            low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
    return {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def delta_time(value) -> str:
    """A UTC instant as Delta's statistics write it: ``2026-11-27T12:00:00.123Z``."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def fit_rows(rows: pa.Table, schema: pa.Schema, required: frozenset[str], where: str) -> pa.Table:
    """``rows`` made to fit a table's schema, as Delta's writer would: each column cast to the
    table's type (a value that does not fit raises), absent nullable columns null; a column the
    table (at ``where``) lacks, or a null in a NOT NULL column, refused with nothing written."""
    unknown = sorted(set(rows.column_names) - set(schema.names))
    if unknown:
        raise LakelogError(f"the table at {where} has no column {unknown[0]}; nothing was written")
    columns = []
    for f in schema:
        column = rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        if f.name in required and column.null_count:
            raise InvalidRecordError(f"a record has no {f.name}; every record needs one. Nothing was written.")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def split_by(table: pa.Table, partition_by: str | None) -> list[tuple[dict[str, str], pa.Table]]:
    """The rows of each value of the partition column ``partition_by`` (by value), without the
    column, with the partition values Delta records: as Delta's writer lays out files. The whole
    table, as one part, when there is no partition column."""
    if partition_by is None:
        return [({}, table)]
    values = table.column(partition_by)
    if values.null_count:
        raise InvalidRecordError(f"a record has no {partition_by}; every record needs one. Nothing was written.")
    rest = table.drop_columns([partition_by])
    return [({partition_by: str(v)}, rest.filter(pc.equal(values, v))) for v in sorted(pc.unique(values).to_pylist())]


def stats_columns(configuration: dict[str, str]) -> frozenset[str] | None:
    """The columns a table keeps statistics of (``delta.dataSkippingStatsColumns``; None: all)."""
    listed = configuration.get("delta.dataSkippingStatsColumns")
    return frozenset(c.strip() for c in listed.split(",")) if listed else None


def parquet_files(parts: list[tuple[dict[str, str], pa.Table]], wanted: frozenset[str] | None, data_change: bool,
                  tags: dict[str, str] | None = None) -> list[tuple[bytes, dict, WrittenFile]]:
    """Each part (from ``split_by``) as a Parquet file's bytes under a new name in its partition's
    folder, with the add action Delta would record for it (statistics of the ``wanted`` columns,
    ``tags`` if any) and what was written, for the caller to store and commit."""
    files = []
    for partition_values, part in parts:
        out = pa.BufferOutputStream()
        pq.write_table(part, out, compression="snappy")
        data = out.getvalue().to_pybytes()
        folder = "".join(f"{k}={v}/" for k, v in partition_values.items())
        name = f"{folder}part-00000-{uuid.uuid4()}-c000.snappy.parquet"  # a new name: nothing to overwrite
        stats = file_stats(part, wanted)
        add = {"path": name, "partitionValues": partition_values, "size": len(data),
               "modificationTime": int(time.time() * 1000), "dataChange": data_change, "stats": json.dumps(stats)}
        if tags:
            add["tags"] = dict(tags)
        files.append((data, add, WrittenFile(partition_values=partition_values, num_records=stats["numRecords"],
                                             min_values=stats["minValues"], max_values=stats["maxValues"], path=name)))
    return files
