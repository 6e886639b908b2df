"""Kafka's framing and headers, with Aiven's ``kio`` for every request and response type.

A request frame is parsed into its header and kio's dataclass for that API and version; a
response is built from plain values (``build``: dicts and lists, the field names of Kafka's
message JSON files in snake case) into kio's dataclass for the request's version, so a handler
writes one answer for every version and fields a version lacks are dropped. Versions outside
``serve.apis.VERSIONS`` are never parsed: ``UnsupportedVersion`` says which, and the connection
answers as Kafka does (KIP-511).
"""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
import time
import uuid
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, get_field_tag, is_optional
from kio.serial._parse import get_field_reader, get_reader
from kio.serial.readers import read_compact_array_length, read_int8, read_legacy_array_length, read_unsigned_varint

API_VERSIONS_KEY = 18
_HEAD = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class MalformedRequest(Exception):
    """A frame that is not a request of its API and version: the connection is closed."""


class UnsupportedVersion(Exception):
    """A request of an API or version this server does not serve."""

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(f"API {api_key} version {version} is not supported")
        self.api_key, self.version, self.correlation_id = api_key, version, correlation_id


@dataclass(frozen=True)
class Request:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # kio's request dataclass
    size: int  # bytes of the frame
    elements: int = field(default=0, compare=False)  # of its arrays, counted when read stepwise


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, version, correlation id) of a frame, read without parsing the rest."""
    if len(frame) < _HEAD.size:
        raise MalformedRequest(f"a request frame of {len(frame)} bytes is shorter than a request header")
    return _HEAD.unpack_from(frame, 0)


def _served(frame: Any, versions: dict[int, tuple[int, int]]) -> tuple[int, int, int, type]:
    """(api key, version, correlation id, kio's request schema) of a frame whose version is served."""
    api_key, version, correlation_id = peek_header(frame)
    span = versions.get(api_key)
    if span is None or not span[0] <= version <= span[1]:
        raise UnsupportedVersion(api_key, version, correlation_id)
    return api_key, version, correlation_id, load_request_schema(api_key, version)


def parse_request(frame: bytes, versions: dict[int, tuple[int, int]]) -> Request:
    """The request in ``frame`` (without its size prefix). ``versions``: API key -> (min, max) served."""
    api_key, version, correlation_id, schema = _served(frame, versions)
    try:
        header, used = _reader(schema.__header_schema__)(frame, 0)
        body, size = _reader(schema)(frame, used)
    except Exception as exc:  # kio's readers raise several kinds for bytes that do not parse
        raise MalformedRequest(f"API {api_key} v{version}: {type(exc).__name__}: {exc}") from None
    # Bytes left after a request that parsed are ignored, as Kafka's broker ignores them: librdkafka
    # writes a Metadata request for every topic (flexible versions) with three stray bytes after its
    # null topic array, and Kafka answers it.
    return Request(api_key, version, correlation_id, header.client_id, body, len(frame))


@cache
def _reader(schema: type) -> Any:
    return entity_reader(schema)


# -- frames too large to parse in one go -----------------------------------------------------------
# kio's reader is native and holds the interpreter until a whole frame is parsed: about 1.4 s for a
# 30 MiB Metadata request, during which no other connection is served (a thread does not help). A
# large frame is read here field by field instead, each array an element at a time with kio's
# reader for the elements that hold no arrays, pausing for the event loop every few milliseconds.
# Its arrays may hold MAX_ELEMENTS elements in all: each is a Python object, and a million of them
# (a 30 MiB request) take ten times the frame's memory and make each pass of Python's collector
# hold the loop for a second. No client of a lakelog root needs as many (Fetch lists a partition
# per element, Metadata a topic); a frame read at once (AT_ONCE_BYTES) cannot hold them.
AT_ONCE_BYTES = 64 * 1024  # kio's reader takes at most a few milliseconds over a frame this size
PAUSE_EVERY_S = 0.005
MAX_ELEMENTS = 100_000


async def read_request(frame: Any, versions: dict[int, tuple[int, int]]) -> Request:
    """``parse_request``, stepwise for a frame over ``AT_ONCE_BYTES``."""
    if len(frame) <= AT_ONCE_BYTES:
        return parse_request(frame, versions)
    return await parse_request_stepwise(frame, versions)


async def parse_request_stepwise(frame: Any, versions: dict[int, tuple[int, int]]) -> Request:
    """``parse_request``'s answer, given back to the event loop every few milliseconds."""
    api_key, version, correlation_id, schema = _served(frame, versions)
    try:
        header, used = _reader(schema.__header_schema__)(frame, 0)
        steps = _Stepwise(frame)
        body, _end = await steps.entity(schema, used)
    except Exception as exc:  # noqa: BLE001 - as parse_request
        raise MalformedRequest(f"API {api_key} v{version}: {type(exc).__name__}: {exc}") from None
    return Request(api_key, version, correlation_id, header.client_id, body, len(frame), steps.elements)


class _Stepwise:
    """Reads one frame; kio's readers answer (value, bytes read), ``at`` is where the next begins."""

    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self.since = time.monotonic()
        self.elements = 0

    def _read(self, reader: Any, at: int) -> tuple[Any, int]:
        value, size = reader(self.frame, at)
        return value, at + size

    async def _pause(self) -> None:
        if time.monotonic() - self.since > PAUSE_EVERY_S:
            await asyncio.sleep(0)
            self.since = time.monotonic()

    async def entity(self, schema: type, at: int) -> tuple[Any, int]:
        plan = _plan(schema)
        if plan is None:  # no arrays inside: kio's reader, at once
            return self._read(_reader(schema), at)
        steps, tagged, length = plan
        values = {}
        for name, kind, how in steps:
            if kind == "value":
                values[name], at = self._read(how, at)
            elif kind == "entity":
                nullable, inner = how
                if nullable:
                    marker, at = self._read(read_int8, at)
                    if marker < 0:
                        values[name] = None
                        continue
                values[name], at = await self.entity(inner, at)
            else:  # an array: of entities, or of values
                count, at = self._read(length, at)
                if count is None or count < 0:
                    values[name] = None
                    continue
                self.elements += count
                if self.elements > MAX_ELEMENTS:
                    raise ValueError(f"more than {MAX_ELEMENTS} array elements in one request")
                items = []
                for i in range(count):
                    if kind == "entities":
                        item, at = await self.entity(how, at)
                    else:
                        item, at = self._read(how, at)
                    items.append(item)
                    if (i & 255) == 255:
                        await self._pause()
                values[name] = tuple(items)
            await self._pause()
        if schema.__flexible__:
            found = {}
            count, at = self._read(read_unsigned_varint, at)
            for _ in range(count):
                tag, at = self._read(read_unsigned_varint, at)
                _size, at = self._read(read_unsigned_varint, at)
                if tag not in tagged:
                    raise KeyError(f"Unknown tagged field tag: {tag}")  # as kio's own reader
                name, reader, _default = tagged[tag]
                found[name], at = self._read(reader, at)
            for name, _reader_, default in tagged.values():
                values[name] = found.get(name, default)
        return schema(**values), at


@cache
def _plan(schema: type) -> tuple | None:
    """How ``_Stepwise`` reads ``schema``: None if it holds no arrays (kio reads it at once), else
    its fields in order as (name, kind, how), its tagged fields by tag, and its arrays' length reader."""
    steps, tagged, stepwise = [], {}, False
    for f in fields(schema):
        tag = get_field_tag(f)
        if tag is not None:
            tagged[tag] = (f.name, get_field_reader(schema, f, False, True), get_tagged_field_default(f))
            continue
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            steps.append((f.name, "entities", kind.type_))
        elif isinstance(kind, PrimitiveTupleField):
            steps.append((f.name, "values", get_reader(f.metadata["kafka_type"], schema.__flexible__, is_optional(f))))
        elif isinstance(kind, EntityField):
            steps.append((f.name, "entity", (is_optional(f), kind.type_)))
            stepwise = stepwise or _plan(kind.type_) is not None
            continue
        else:
            steps.append((f.name, "value", get_field_reader(schema, f, False, False)))
            continue
        stepwise = True
    if not stepwise:
        return None
    return steps, tagged, read_compact_array_length if schema.__flexible__ else read_legacy_array_length


@cache
def _writer(schema: type) -> Any:
    return entity_writer(schema)


def response_frame(api_key: int, version: int, correlation_id: int, values: dict) -> bytes:
    """The size-prefixed response frame of ``values`` for ``api_key`` at ``version``."""
    schema = load_response_schema(api_key, version)
    body = build(schema, values)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_schema = schema.__header_schema__
    if api_key == API_VERSIONS_KEY:  # ApiVersions answers with header v0 whatever its version (KIP-511)
        from kio.schema.response_header.v0.header import ResponseHeader as header_schema
    _writer(header_schema)(out, header_schema(correlation_id=correlation_id))
    _writer(schema)(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def build(schema: type, values: dict) -> Any:
    """kio's dataclass ``schema`` from plain ``values``: keys the schema lacks are dropped, fields
    absent from ``values`` take their defaults (a required one without a default raises
    KeyError, a bug in the handler); nested entities are built from dicts and lists of dicts."""
    kwargs = {}
    for f in _fields(schema):
        if f.name not in values:
            if f.default is MISSING and f.default_factory is MISSING:
                raise KeyError(f"{schema.__name__} v{schema.__version__} needs {f.name}")
            continue
        kwargs[f.name] = _value(f, values[f.name])
    return schema(**kwargs)


@cache
def _fields(schema: type) -> tuple:
    return tuple(fields(schema))


_EMPTY = {"string": "", "bytes": b"", "records": b""}


def _value(f: Any, value: Any) -> Any:
    if value is None:  # a version where the field is not nullable takes its empty value (Kafka's own answers do)
        if is_optional(f):
            return None
        if f.default is not MISSING:
            return f.default
        return _EMPTY.get(f.metadata.get("kafka_type"), None)
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField):
        return tuple(v if is_dataclass(v) else build(kind.type_, v) for v in value)
    if isinstance(kind, EntityField):
        return value if is_dataclass(value) else build(kind.type_, value)
    kafka_type = f.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return ErrorCode(int(value)) if not isinstance(value, ErrorCode) else value
    if kafka_type in ("timedelta_i32", "timedelta_i64") and not isinstance(value, datetime.timedelta):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "uuid" and not isinstance(value, uuid.UUID):
        return uuid.UUID(str(value))
    if kafka_type in ("string",) and isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(value)
    return value


def error_code(name: str) -> ErrorCode:
    """Kafka's error code by its name (``NOT_COORDINATOR``)."""
    return ErrorCode[name.lower()]
