"""Kafka's framing and headers, with Aiven's ``kio`` for every request and response type.

A request frame is parsed into its header and kio's dataclass for that API and version; a
response is built from plain values (``build``: dicts and lists, the field names of Kafka's
message JSON files in snake case) into kio's dataclass for the request's version, so a handler
writes one answer for every version and fields a version lacks are dropped. Versions outside
``serve.apis.VERSIONS`` are never parsed: ``UnsupportedVersion`` says which, and the connection
answers as Kafka does (KIP-511).
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

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


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, version, correlation id) of a frame, read without parsing the rest."""
    if len(frame) < _HEAD.size:
        raise MalformedRequest(f"a request frame of {len(frame)} bytes is shorter than a request header")
    return _HEAD.unpack_from(frame, 0)


def parse_request(frame: bytes, versions: dict[int, tuple[int, int]]) -> Request:
    """The request in ``frame`` (without its size prefix). ``versions``: API key -> (min, max) served."""
    api_key, version, correlation_id = peek_header(frame)
    span = versions.get(api_key)
    if span is None or not span[0] <= version <= span[1]:
        raise UnsupportedVersion(api_key, version, correlation_id)
    schema = load_request_schema(api_key, version)
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
