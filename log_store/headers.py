"""A record's headers: Kafka's ordered list of (key, value) pairs, in which a key may repeat.

Logs and sinks made by this release keep them so (``HEADERS_TYPE``, the type of Spark's Kafka
source's ``headers`` column). Those made by earlier releases keep a ``map<string, binary>``
(``LEGACY_HEADERS_TYPE``), which holds neither the order nor a repeated key: writing a repeated
key to one is refused with an error that says so. ``headers_as`` turns either form into the one
a table holds, in one place.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, DataType, MapType, StringType, StructField, StructType

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
                         True)
LEGACY_HEADERS_TYPE = MapType(StringType(), BinaryType(), True)


def headers_as(column: str, given: DataType | None, target: DataType) -> Column:
    """The headers in ``column`` (of type ``given``: a map or a list of (key, value) structs;
    None: the frame has none) as ``target`` (``HEADERS_TYPE`` or ``LEGACY_HEADERS_TYPE``)."""
    if given is None:
        return F.lit(None).cast(target).alias("headers")
    col = F.col(column)
    if isinstance(target, MapType):
        value = col if isinstance(given, MapType) else F.map_from_entries(col)
    else:
        value = F.map_entries(col) if isinstance(given, MapType) else col
    return value.cast(target).alias("headers")


def is_headers_type(t: DataType) -> bool:
    """A type ``headers_as`` takes: a map of string keys, or a list of (key, value) structs."""
    if isinstance(t, MapType):
        return isinstance(t.keyType, StringType) and isinstance(t.valueType, (BinaryType, StringType))
    if isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
        fields = {f.name: f.dataType for f in t.elementType.fields}
        return set(fields) == {"key", "value"} and isinstance(fields["key"], StringType) \
            and isinstance(fields["value"], (BinaryType, StringType))
    return False
