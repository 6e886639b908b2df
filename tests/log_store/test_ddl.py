"""lakelog's reader of column lists against Spark's own parser, for every schema lakelog declares."""

import pytest

from control_plane.tables import GROUP_OFFSETS_SCHEMA, TABLES
from log_store.ddl import parse_columns
from log_store.errors import LakelogError
from pipelines.inputs import JSON_SCHEMA

DECLARED = {**{name: ddl for name, ddl in TABLES.items() if isinstance(ddl, str)},
            "group_offsets": GROUP_OFFSETS_SCHEMA, "json_input": JSON_SCHEMA}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_a_declared_schema_reads_as_spark_reads_it(spark, name):
    assert parse_columns(DECLARED[name]) == spark.createDataFrame([], DECLARED[name]).schema


@pytest.mark.parametrize("ddl", ["a STRING,", "a BLOB", "a ARRAY<STRING", "a STRING NOT", "a STRING extra"])
def test_a_column_list_it_cannot_read_is_refused_by_name(ddl):
    with pytest.raises(LakelogError, match="cannot read the column list"):
        parse_columns(ddl)
