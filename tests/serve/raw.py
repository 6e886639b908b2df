"""A bare Kafka-protocol client for the tests that need exact bytes: requests built from plain
values with kio's types (``serve.wire.build``), one frame at a time, responses read with kio."""

from __future__ import annotations

import io
import socket
import struct

from aiokafka.record._crecords import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from serve.wire import build


def frame(api_key: int, version: int, values: dict, correlation_id: int = 1, client_id: str = "raw") -> bytes:
    schema = load_request_schema(api_key, version)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    entity_writer(header_schema)(out, header_schema(request_api_key=api_key, request_api_version=version,
                                                    correlation_id=correlation_id, client_id=client_id))
    entity_writer(schema)(out, build(schema, values))
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


class RawClient:
    def __init__(self, port: int, timeout: float = 60) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._correlation = 0

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next response frame (without its size), or None if the server closed the connection."""
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def call(self, api_key: int, version: int, values: dict):
        """Send one request and return kio's response dataclass."""
        self.send(api_key, version, values)
        return self.receive(api_key, version)

    def send(self, api_key: int, version: int, values: dict) -> None:
        """Send one request; ``receive`` reads its answer (several may be sent first)."""
        self._correlation += 1
        self.send_bytes(frame(api_key, version, values, self._correlation))

    def receive(self, api_key: int, version: int):
        """kio's response dataclass of the next answer, to a request of ``api_key`` at ``version``."""
        data = self.read_frame()
        assert data is not None, "the server closed the connection"
        schema = load_response_schema(api_key, version)
        header, used = entity_reader(schema.__header_schema__ if api_key != 18 else _header_v0())(data, 0)
        return entity_reader(schema)(data, used)[0]

    def close(self) -> None:
        self.sock.close()


def _header_v0():
    from kio.schema.response_header.v0.header import ResponseHeader

    return ResponseHeader


def batch(values: list[bytes], producer_id: int = -1, epoch: int = -1, sequence: int = -1, keys=None) -> bytes:
    """One record batch (magic 2) of ``values``, with an idempotent producer's fields when given."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=producer_id,
                                        producer_epoch=epoch, base_sequence=sequence, batch_size=2**30)
    for i, v in enumerate(values):
        builder.append(i, 1_700_000_000_000 + i, keys[i] if keys else None, v, [])
    return bytes(builder.build())


def produce(client: RawClient, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9):
    """(error code, base offset) of one partition's produce."""
    response = client.call(0, version, produce_request(topic, partition, records, acks))
    answer = response.responses[0].partition_responses[0]
    return int(answer.error_code), int(answer.base_offset)


def produce_request(topic: str, partition: int, records: bytes, acks: int = -1) -> dict:
    """A Produce request's values: ``records`` for one partition."""
    return {"transactional_id": None, "acks": acks, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def rebuilt(data: bytes, count: int | None = None, last_delta: int | None = None, records: bytes | None = None,
            attributes: int | None = None) -> bytes:
    """The batch ``data`` with other header fields or records, its length and CRC made to match (a
    batch a broken or hostile client could send)."""
    from crc32c import crc32c

    head = bytearray(data[:61])
    body = data[61:] if records is None else records
    for at, fmt, value in ((57, ">i", count), (23, ">i", last_delta), (21, ">h", attributes)):
        if value is not None:
            struct.pack_into(fmt, head, at, value)
    struct.pack_into(">i", head, 8, 49 + len(body))
    struct.pack_into(">I", head, 17, crc32c(bytes(head[21:]) + body))
    return bytes(head) + body


def uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (flexible versions' compact lengths), for requests built by hand."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def metadata_request(name: bytes, times: int) -> bytes:
    """A Metadata v12 request naming ``name`` ``times`` times, built without kio (fast), unframed."""
    head = struct.pack(">hhih", 3, 12, 1, 3) + b"raw" + b"\0"
    return head + uvarint(times + 1) + (b"\0" * 16 + uvarint(len(name) + 1) + name + b"\0") * times + b"\0\0\0"


def sized(request: bytes) -> bytes:
    """``request`` behind its four-byte length, as it goes on the wire."""
    return struct.pack(">i", len(request)) + request
