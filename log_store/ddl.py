"""Spark's DDL for a table's columns (``"topic STRING NOT NULL, partitions ARRAY<STRUCT<...>>"``)
read without a Spark session, for the types lakelog's tables use: Spark parses DDL in its JVM,
and the tables are made and written through delta-rs, where no JVM runs. A unit test holds this
reader to Spark's own parser for every schema lakelog declares."""

from __future__ import annotations

import re

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from log_store.errors import LakelogError

_ATOMS: dict[str, DataType] = {
    "STRING": StringType(), "INT": IntegerType(), "INTEGER": IntegerType(), "BIGINT": LongType(), "LONG": LongType(),
    "BOOLEAN": BooleanType(), "DOUBLE": DoubleType(), "BINARY": BinaryType(), "TIMESTAMP": TimestampType(),
    "TIMESTAMP_NTZ": TimestampNTZType(),
}
_TOKEN = re.compile(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*|[<>,:])")


def _tokens(ddl: str) -> list[str]:
    out, at = [], 0
    while at < len(ddl.rstrip()):
        match = _TOKEN.match(ddl, at)
        if not match:
            raise LakelogError(f"cannot read the column list {ddl!r} at {ddl[at:at + 20]!r}")
        out.append(match.group(1))
        at = match.end()
    return out


class _Reader:
    def __init__(self, ddl: str) -> None:
        self.ddl, self.tokens, self.at = ddl, _tokens(ddl), 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise LakelogError(f"cannot read the column list {self.ddl!r}: expected {expected or 'more'}, found {token}")
        self.at += 1
        return token

    def name(self) -> str:
        token = self.take()
        return token[1:-1] if token.startswith("`") else token

    def data_type(self) -> DataType:
        word = self.take().upper()
        if word in _ATOMS:
            return _ATOMS[word]
        self.take("<")
        if word == "ARRAY":
            element = self.data_type()
            self.take(">")
            return ArrayType(element, True)
        if word == "MAP":
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            return MapType(key, value, True)
        if word == "STRUCT":
            fields = [self.field(":")]
            while self.peek() == ",":
                self.take(",")
                fields.append(self.field(":"))
            self.take(">")
            return StructType(fields)
        raise LakelogError(f"cannot read the column list {self.ddl!r}: unknown type {word}")

    def field(self, separator: str | None = None) -> StructField:
        name = self.name()
        if separator:
            self.take(separator)
        kind = self.data_type()
        nullable = True
        if (self.peek() or "").upper() == "NOT":
            self.take("NOT")
            self.take("NULL")
            nullable = False
        return StructField(name, kind, nullable)


def parse_columns(ddl: str) -> StructType:
    """The StructType Spark makes of the column list ``ddl``."""
    reader = _Reader(ddl)
    fields = [reader.field()]
    while reader.peek() == ",":
        reader.take(",")
        fields.append(reader.field())
    if reader.peek() is not None:
        raise LakelogError(f"cannot read the column list {ddl!r}: unexpected {reader.peek()}")
    return StructType(fields)
