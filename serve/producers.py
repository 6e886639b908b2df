"""Kafka's idempotent-producer rules over lakelog's producer marks (pure; docs/serve.md).

Kafka numbers an idempotent producer's batches per (producer id, epoch, partition); lakelog keeps
one high-water sequence per producer id in the log (a set transaction moved with the records). The
lakelog producer id of Kafka producer ``P`` on partition ``p`` is ``kafka-P-p``, and each record's
sequence is ``epoch << 40 | lap << 31 | seq``: Kafka's 31-bit sequence, the laps it wrapped, and the
epoch above them, so a new epoch or a wrapped sequence is always above every earlier value and
lakelog's "at or below the mark was written" holds. ``judge`` is Kafka's ``ProducerAppendInfo``
check of one batch against the mark and the producer's last five batches; ``ProducerStates`` is
what a server keeps of each producer between commits, forgotten once idle as Kafka forgets one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

EPOCH_SHIFT = 40
SEQ_BITS = 31
SEQ_SPAN = 1 << SEQ_BITS  # Kafka's sequences run 0 .. 2^31 - 1, then wrap to 0
NO_PRODUCER = -1
BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the batches a retry is recognised among


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


def judge(mark: int, epoch: int, first_seq: int, count: int,
          recent: Collection[tuple[int, int]] | None = None) -> Verdict:
    """Kafka's check of a batch (``epoch``, sequences ``first_seq`` .. ``+count-1``) against the
    producer's mark in the log (-1: nothing written yet). The batch's records take sequence values
    ``first`` .. ``first + count - 1`` (a wrap past 2^31 - 1 carries into the lap). ``recent``: the
    (first, last) sequence values of the producer's last five batches, when known: a batch below
    the mark is a duplicate only if it is one of them, as in Kafka (an older one is out of order);
    unknown (None: after a restart, or batches another server wrote), any batch below the mark is."""
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
    if epoch_of(first) == epoch and first + count - 1 <= mark \
            and (recent is None or (first, first + count - 1) in recent):
        return Verdict("duplicate", first)
    return Verdict("error", error="OUT_OF_ORDER_SEQUENCE_NUMBER")


@dataclass
class _State:
    mark: int
    used: float
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))  # (first, last), newest last


class ProducerStates:
    """What a server knows of each producer id of each log (keys: (log path, lakelog producer id)):
    its mark as last seen, and the batches it saw appended that end at that mark (at most
    ``BATCHES_KEPT``). A producer unused for ``expiration_ms`` (Kafka's ``producer.id.expiration.ms``)
    is forgotten: its mark is read from the log again if it comes back. Times are the caller's
    monotonic clock. Commits of several topics use it at once, from the pool's threads."""

    def __init__(self, expiration_ms: int) -> None:
        self.expiration = expiration_ms / 1000
        self._states: dict[tuple[str, str], _State] = {}
        self._swept = 0.0
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._states

    def __len__(self) -> int:
        return len(self._states)

    def known(self, keys: Collection[tuple[str, str]], now: float) -> dict[tuple[str, str], tuple[int, list | None]]:
        """(mark, last batches) of each of ``keys`` the server knows, each marked used ``now``; the
        batches are None when those known do not reach the mark (not known)."""
        out = {}
        with self._lock:
            for key in keys:
                state = self._states.get(key)
                if state is not None:
                    state.used = now
                    reach = bool(state.batches) and state.batches[-1][1] == state.mark
                    out[key] = (state.mark, list(state.batches) if reach else None)
        return out

    def learned(self, key: tuple[str, str], mark: int, now: float) -> None:
        """The log holds ``mark`` for the producer (read, or refused an append with it)."""
        with self._lock:
            state = self._states.get(key)
            if state is None:
                self._states[key] = _State(mark, now)
            elif state.mark != mark:
                state.mark, state.used = mark, now
                state.batches.clear()

    def appended(self, key: tuple[str, str], first: int, last: int, now: float) -> None:
        with self._lock:
            state = self._states.setdefault(key, _State(first - 1, now))
            if state.mark != first - 1:  # not the batch after the last one known: those no longer reach the mark
                state.batches.clear()
            state.batches.append((first, last))
            state.mark, state.used = last, now

    def forget(self, path: str) -> None:
        with self._lock:
            for key in [k for k in self._states if k[0] == path]:
                del self._states[key]

    def expire(self, now: float) -> None:
        """Forget producers unused for the expiration (looked at once a minute at most)."""
        with self._lock:
            if now - self._swept < min(60.0, self.expiration):
                return
            self._swept = now
            for key in [k for k, s in self._states.items() if now - s.used > self.expiration]:
                del self._states[key]
