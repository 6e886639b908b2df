"""Kafka's idempotent-producer rules over lakelog's producer marks (pure; docs/serve.md).

Kafka numbers an idempotent producer's batches per (producer id, epoch, partition); lakelog keeps
one high-water sequence per producer id in the log (a set transaction moved with the records). The
lakelog producer id of Kafka producer ``P`` on partition ``p`` is ``kafka-P-p``, and each record's
sequence is ``epoch << 40 | lap << 31 | seq``: Kafka's 31-bit sequence, the laps it wrapped, and the
epoch above them, so a new epoch or a wrapped sequence is always above every earlier value and
lakelog's "at or below the mark was written" holds. ``judge`` is Kafka's ``ProducerAppendInfo``
check of one batch against the mark.
"""

from __future__ import annotations

from dataclasses import dataclass

EPOCH_SHIFT = 40
SEQ_BITS = 31
SEQ_SPAN = 1 << SEQ_BITS  # Kafka's sequences run 0 .. 2^31 - 1, then wrap to 0
NO_PRODUCER = -1


def lakelog_producer_id(producer_id: int, partition: int) -> str:
    """The lakelog producer id of Kafka producer ``producer_id`` writing to ``partition``."""
    return f"kafka-{producer_id}-{partition}"


def sequence_value(epoch: int, seq: int, lap: int = 0) -> int:
    """The ``sequence`` column value of Kafka sequence ``seq`` of ``epoch`` after ``lap`` wraps."""
    return (epoch << EPOCH_SHIFT) | (lap << SEQ_BITS) | seq


def epoch_of(value: int) -> int:
    return value >> EPOCH_SHIFT


@dataclass(frozen=True)
class Verdict:
    """What to do with one batch: ``append`` it with its first record at ``first``, answer it as a
    ``duplicate`` of the records written from ``first``, or answer ``error`` (a Kafka code name)."""

    kind: str
    first: int = -1
    error: str = "NONE"

    @property
    def appends(self) -> bool:
        return self.kind == "append"


def judge(mark: int, epoch: int, first_seq: int, count: int) -> Verdict:
    """Kafka's check of a batch (``epoch``, sequences ``first_seq`` .. ``+count-1``) against the
    producer's mark in the log (-1: nothing written yet). The batch's records take sequence values
    ``first`` .. ``first + count - 1`` (a wrap past 2^31 - 1 carries into the lap)."""
    if first_seq < 0 or first_seq >= SEQ_SPAN or count <= 0 or epoch < 0 or epoch >= 1 << 15:
        return Verdict("error", error="INVALID_RECORD")
    if mark < 0:  # no state: any sequence starts it (Kafka accepts one after its state expired too)
        return Verdict("append", sequence_value(epoch, first_seq))
    current = epoch_of(mark)
    if epoch < current:
        return Verdict("error", error="INVALID_PRODUCER_EPOCH")
    if epoch > current:  # a bumped epoch starts again at 0
        return Verdict("append", sequence_value(epoch, 0)) if first_seq == 0 else Verdict(
            "error", error="OUT_OF_ORDER_SEQUENCE_NUMBER")
    following = mark + 1
    if first_seq == following % SEQ_SPAN:
        return Verdict("append", following)
    back = ((mark % SEQ_SPAN) - first_seq) % SEQ_SPAN  # how far below the mark the batch would start
    first = mark - back
    if epoch_of(first) == epoch and first + count - 1 <= mark:
        return Verdict("duplicate", first)
    return Verdict("error", error="OUT_OF_ORDER_SEQUENCE_NUMBER")
