"""Where one group member stands on one topic, kept in one object: the next offset to deliver of
each partition it owns, the positions of its warm-up copies, and what it last published for the
resize gates (rule 10 of the protocol). Pure: no Spark, no tables; ``GroupConsumer`` carries out
what it decides (deliver, commit, publish) and tells it what happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class MemberPositions:
    owned: dict[int, int] = field(default_factory=dict)  # partition -> next offset to deliver
    warm: dict[int, int] = field(default_factory=dict)  # warm-up copy -> next offset to read
    published: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (position, epoch) last published
    # owned partitions whose start is not known yet (``latest`` while the high watermark is not known)
    waiting: set[int] = field(default_factory=set)

    def drop(self, partitions: Iterable[int]) -> None:
        """Partitions given up or lost: forgotten, and published again the first time they return."""
        for p in partitions:
            self.owned.pop(p, None)
            self.published.pop(p, None)
            self.waiting.discard(p)

    def clear(self) -> None:
        """The group fenced the member: it delivers nothing until it has joined again."""
        self.owned.clear()
        self.waiting.clear()

    def assign(self, starts: dict[int, int], waiting: Iterable[int] = ()) -> None:
        """Partitions now owned, from ``starts``, and owned ones whose start is not known yet
        (``waiting``: asked for again, ``Consumer.positions``); a warm-up copy of one ends with its
        ownership."""
        for p, start in starts.items():
            self.owned[p] = start
            self.warm.pop(p, None)
            self.waiting.discard(p)
        for p in waiting:
            self.waiting.add(p)
            self.warm.pop(p, None)

    def advance(self, ranges: dict[int, tuple[int, int]]) -> None:
        """A batch delivered ``ranges`` (partition -> [start, end)): each position moves to its end."""
        self.owned.update({p: end for p, (_start, end) in ranges.items()})

    def move(self, positions: dict[int, int]) -> None:
        """Owned partitions moved by the caller (a sink ahead, a grown-back incarnation): others stay unowned."""
        self.owned.update({p: o for p, o in positions.items() if p in self.owned})

    def keep_only(self, owned: set[int]) -> list[int]:
        """Drop positions of partitions the member does not own; the ones dropped, sorted."""
        stray = sorted(set(self.owned) - owned)
        for p in stray:
            del self.owned[p]
        self.waiting &= owned
        return stray

    def warm_up(self, partitions: Iterable[int], earliest: dict[int, int], still_warm: set[int]) -> None:
        """Start warm-up copies of ``partitions`` at the log's earliest offset; end those no longer warm."""
        for p in partitions:
            self.warm.setdefault(p, earliest.get(p, 0))
        for p in list(self.warm):
            if p not in still_warm:
                del self.warm[p]

    def warm_advance(self, ranges: dict[int, tuple[int, int]]) -> None:
        self.warm.update({p: end for p, (_start, end) in ranges.items()})

    def warm_ready(self, committed: dict[int, int], max_lag: int) -> list[int]:
        """Warm-up copies within ``max_lag`` records of the owner's committed position."""
        return [p for p, pos in self.warm.items() if pos >= committed.get(p, 0) - max_lag]

    def due_publications(self, watched: set[int], ends: dict[int, int], epochs: dict[int, int],
                         threshold: Callable[[int, int], int]) -> dict[int, int]:
        """Which owned positions to publish now, under rule 10's conditions, and remember them:
        the first time; when the position grew and reached the log end; when the position passed
        the threshold of the largest epoch published before (``threshold(partition, epoch)``)."""
        due: dict[int, int] = {}
        for p in sorted(watched & set(self.owned)):
            pos, epoch = self.owned[p], epochs.get(p, 0)
            last = self.published.get(p)
            if (last is None or (pos > last[0] and pos >= ends.get(p, 0))
                    or (epoch > last[1] and pos - 1 > threshold(p, last[1]))):
                due[p] = pos
                self.published[p] = (pos, epoch)
        return due
