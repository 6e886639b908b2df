"""A produced batch's records are inflated within a bound (serve.inflate): a bomb stops at the
bound without the memory for what it would inflate to, and bytes that are not the codec's are
refused. Spark-free."""

from __future__ import annotations

import resource

import cramjam
import pytest
from aiokafka.codec import snappy_encode

from serve.inflate import GZIP, LZ4, SNAPPY, ZSTD, Corrupt, TooLarge, inflate

RECORDS = b"the records of a batch " * 200


def _compressed(codec: int, data: bytes) -> bytes:
    if codec == SNAPPY:
        return snappy_encode(data)  # xerial's blocks, as Java's client writes them
    return bytes({GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec].compress(data))


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_records_within_the_bound_come_back_whole_and_past_it_are_too_large(codec):
    data = _compressed(codec, RECORDS)
    assert inflate(codec, data, len(RECORDS)) == RECORDS
    with pytest.raises(TooLarge):
        inflate(codec, data, len(RECORDS) - 1)
    with pytest.raises(Corrupt):
        inflate(codec, data[: len(data) // 2] + b"\x07" * 9, len(RECORDS))


def test_raw_snappy_as_librdkafka_writes_it_is_read_too():
    assert inflate(SNAPPY, bytes(cramjam.snappy.compress_raw(RECORDS)), len(RECORDS)) == RECORDS


def test_a_bomb_stops_at_the_bound_without_the_memory_it_would_take():
    compressor, chunk = cramjam.zstd.Compressor(level=3), bytes(2 ** 20)
    for _ in range(512):
        compressor.compress(chunk)
    bomb = bytes(compressor.finish())  # 512 MiB of zeros in a few kilobytes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TooLarge):
        inflate(ZSTD, bomb, 2 ** 20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 64 * 1024  # KiB: far below 512 MiB


def test_a_codec_kafka_does_not_have_is_corrupt():
    with pytest.raises(Corrupt):
        inflate(5, b"anything", 100)
