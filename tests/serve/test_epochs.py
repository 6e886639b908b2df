"""lakelog's leader epochs as Kafka's: batches carry each record's epoch, a request with another
epoch than the partition's is told so, and OffsetForLeaderEpoch says where an epoch ended; what is
not supported (transactions) is refused with the codes Kafka's clients act on."""

from __future__ import annotations

import pytest
from aiokafka.record._crecords import MemoryRecords
from kio.schema.errors import ErrorCode

from control_plane.controller import TopicController
from tests.serve.raw import RawClient, batch, produce

pytestmark = pytest.mark.kafka_clients
NONE, UNKNOWN_LEADER_EPOCH, FENCED_LEADER_EPOCH = 0, ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch


def fetch(client, partition: int, offset: int, epoch: int = -1):
    response = client.call(1, 12, {"max_wait": 0, "min_bytes": 1, "topics": [
        {"topic": "t", "partitions": [{"partition": partition, "current_leader_epoch": epoch, "fetch_offset": offset,
                                       "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": []})
    return response.responses[0].partitions[0]


def end_of(client, partition: int, epoch: int, current: int = -1):
    answer = client.call(23, 4, {"topics": [{"topic": "t", "partitions": [
        {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}]}]}).topics[0].partitions[0]
    return int(answer.error_code), int(answer.leader_epoch), int(answer.end_offset)


def test_batches_carry_lakelog_epochs_and_a_grow_ends_an_epoch_where_the_next_begins(spark, served, root):
    served.ctx.admin.create("t", 2)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b", b"c"])) == (NONE, 0)
    TopicController(spark, root).alter("t", 3)  # every partition's epoch bumps: 0 -> 1
    assert produce(client, "t", 0, batch([b"d", b"e"])) == (NONE, 3)

    data = fetch(client, 0, 0)
    records = MemoryRecords(bytes(data.records))
    offsets = []
    while records.has_next():
        offsets += [r.offset for r in records.next_batch()]
    assert offsets == [0, 1, 2, 3, 4]
    raw = bytes(data.records)  # partitionLeaderEpoch of each batch: bytes 12-16 of its header
    first_len = int.from_bytes(raw[8:12], "big") + 12
    assert int.from_bytes(raw[12:16], "big") == 0 and int.from_bytes(raw[first_len + 12:first_len + 16], "big") == 1

    assert end_of(client, 0, 0) == (NONE, 0, 3)  # epoch 0 ended where epoch 1's first record is
    assert end_of(client, 0, 1) == (NONE, 1, 5)  # the current epoch ends at the log end
    assert end_of(client, 2, 0) == (NONE, 0, 0)  # the new partition has no record of epoch 0
    assert fetch(client, 0, 0, epoch=1).error_code == NONE
    assert fetch(client, 0, 0, epoch=0).error_code == FENCED_LEADER_EPOCH
    assert fetch(client, 0, 0, epoch=2).error_code == UNKNOWN_LEADER_EPOCH
    assert end_of(client, 0, 0, current=0)[0] == FENCED_LEADER_EPOCH
    client.close()


def test_transactions_are_served_and_a_control_batch_refused(served):
    """The transactional producer's APIs are advertised (tests/serve/test_txn_produce*.py use
    them); a transactional batch sent without a transactional id, or a control batch (a marker,
    the coordinator's to write), is refused."""
    from tests.serve.raw import rebuilt

    client = RawClient(served.port)
    versions = {k.api_key for k in client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).api_keys}
    assert {24, 25, 26, 28} <= versions  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
    assert {68, 69} <= versions  # KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe are served
    served.ctx.admin.create("t", 1)
    code, _ = produce(client, "t", 0, _transactional_batch())
    assert code == ErrorCode.invalid_record
    code, _ = produce(client, "t", 0, rebuilt(_transactional_batch(), attributes=0x30))
    assert code == ErrorCode.invalid_record
    client.close()


def _transactional_batch() -> bytes:
    from aiokafka.record._crecords import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=1,
                                        producer_epoch=0, base_sequence=0, batch_size=2**20)
    builder.append(0, 1, None, b"v", [])
    return bytes(builder.build())
