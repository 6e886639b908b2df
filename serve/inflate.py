"""A produced batch's records uncompressed, never past a bound (docs/serve.md, "Limits").

Kafka's producers compress a batch's records with gzip, snappy (raw, or in xerial's blocks, as
Java's client writes it), lz4 (frames, KIP-57) or zstd. A few kilobytes of zstd can stand for a
gigabyte of zeros; aiokafka's codec inflates a batch whole, so a batch is inflated here first,
into a buffer no larger than the bound: past it the codec stops at once, and the server's memory
never holds more than the bound. Pure: no Spark, no I/O.
"""

from __future__ import annotations

import struct

import cramjam

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODECS = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}
_XERIAL = b"\x82SNAPPY\x00"
_FULL = "failed to write whole buffer"  # cramjam's words when the output would pass the buffer
FIRST_GUESS = 64 * 1024  # the first buffer tried: most batches are far smaller than the bound


class TooLarge(Exception):
    """The records would inflate past the bound."""


class Corrupt(Exception):
    """The compressed bytes are not what their codec writes."""


def inflate(codec: int, data: bytes, bound: int) -> bytes:
    """``data`` decompressed with Kafka's ``codec`` (1 gzip, 2 snappy, 3 lz4, 4 zstd): TooLarge if
    it would be more than ``bound`` bytes, Corrupt if it is not that codec's output."""
    if codec == SNAPPY:
        return _snappy(data, bound)
    if codec not in CODECS:
        raise Corrupt(f"compression codec {codec} is not one of Kafka's (1 gzip, 2 snappy, 3 lz4, 4 zstd)")
    module = CODECS[codec]
    size = min(bound + 1, max(FIRST_GUESS, 4 * len(data)))
    while True:  # a buffer four times larger each time it fills, up to one byte past the bound
        out = bytearray(size)
        try:
            n = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _FULL not in str(exc):
                raise Corrupt(str(exc)) from None
            if size > bound:
                raise TooLarge(f"more than {bound} bytes") from None
            size = min(bound + 1, size * 4)
            continue
        if n > bound:
            raise TooLarge(f"more than {bound} bytes")
        return bytes(memoryview(out)[:n])


def _snappy(data: bytes, bound: int) -> bytes:
    """Raw snappy, or xerial's framing (a header, then blocks of a 4-byte length and raw snappy);
    each raw block says its uncompressed length first, read before anything is inflated."""
    if not data.startswith(_XERIAL):
        return _raw_snappy(data, bound)
    out, pos, left = [], 16, bound
    while pos < len(data):
        if pos + 4 > len(data):
            raise Corrupt("a snappy block's length is cut short")
        (length,) = struct.unpack_from(">i", data, pos)
        if length < 0 or pos + 4 + length > len(data):
            raise Corrupt("a snappy block runs past the batch")
        block = _raw_snappy(data[pos + 4:pos + 4 + length], left)
        out.append(block)
        left -= len(block)
        pos += 4 + length
    return b"".join(out)


def _raw_snappy(data: bytes, bound: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(data)
    except cramjam.DecompressionError as exc:
        raise Corrupt(str(exc)) from None
    if size > bound:
        raise TooLarge(f"more than {bound} bytes")
    out = bytearray(size)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as exc:
        raise Corrupt(str(exc)) from None
    return bytes(memoryview(out)[:n])
