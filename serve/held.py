"""What members of the Kafka groups coordinated here may hold undelivered: the records this server
served them (answered in a Fetch) above their group's committed offset (docs/serve.md, "Consumer
groups across a resize"). A client reads ahead of what it delivers, so records it holds may be gone
from the log (delete-records or retention raised the log start, key compaction removed them) while
it is still to deliver them: the resize gates (``serve.gates``) count a committed offset below what
the log holds as consumed past the gap only where no member holds records of it.

A member's fetched records of a partition it lost are not its to deliver: Kafka's clients drop them
(the Java consumer returns no records of a partition no longer assigned; librdkafka bumps the
partition's fetch version, dropping what was queued), so an entry goes when its holder loses the
partition, leaves, or its group commits past it. Fetches name no member: a holder is a client id
and host, as ``Server.groups_reading`` finds a fetch's groups. A fetch's groups are read on the
event loop, and what a pass of it served is kept while it is read on the pool and recorded on the
event loop once the read came back (``Reading``, one for the whole request, its wait for records
included): a partition its holder lost since the server took the request is not recorded, as the
client drops that answer too, and nothing is recorded of a pass whose answer is never sent (its
connection closed, its read failed), though its read runs on on the pool. While a pass of a fetch is read, its
fetch offsets are held already (``Reading.fetching``): it may be planned on an older view of the log
than a gate judges gaps on (key compaction's commit landed in between), and serve records that view
still holds before it records them; a gate moving the committed offset over them meanwhile would
pass a resize's barrier, and a moved key's newer record reach another member first.

Thread-safe: a fetch's passes recorded on the event loop, gates read on the pool.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

Holder = tuple[str, str]  # (client id, host)


@dataclass
class _Served:
    low: int  # the lowest offset served since the group's last commit covering it
    high: int  # the offset after the highest served
    holders: set[Holder] = field(default_factory=set)


Loss = tuple[str, frozenset[Holder] | None, frozenset[tuple[str, int]] | None]  # (group, holders, partitions)


class Reading:
    """A fetch of ``holder``, a member of ``groups`` (per topic, read on the event loop at each pass
    of the fetch's wait): what it serves is recorded through it (on the pool), but not where its
    holder lost the partition since the fetch was taken (the client drops that answer). Watched for
    losses while referenced."""

    def __init__(self, served: "ServedRecords", holder: Holder, groups: dict[str, list[str]]) -> None:
        self.served, self.holder, self.groups = served, holder, groups
        self.losses: list[Loss] = []  # appended under ``served``'s lock
        # what the pass being read served, recorded when it ends; left unrecorded if it fails
        self._pass: list[tuple[str, str, int, int, int]] | None = None

    def record(self, topic: str, location: str, partition: int, start: int, end: int) -> None:
        """Records of ``[start, end)`` of ``topic``'s ``partition`` served by this fetch: kept with
        its pass while one is read (``fetching``), else recorded now."""
        kept = self._pass  # read once: a pass abandoned keeps its list, never recorded
        if kept is not None:
            kept.append((topic, location, partition, start, end))
        elif self.groups.get(topic):
            self.served.record(self.groups[topic], topic, location, partition, start, end, self.holder, self)

    @contextmanager
    def fetching(self, offsets: dict[str, dict[int, int]]) -> Iterator[None]:
        """While a pass of the fetch is read: its fetch offsets (per topic, partition -> offset) held
        in the groups it is a member of, before it reads its view of the log, and what it serves
        recorded once it came back, before they are let go. A pass that fails or is cancelled (its
        connection closed) records nothing: its answer is never sent, though its read may run on."""
        keys = [(g, t, p, o) for t, wanted in offsets.items() for g in self.groups.get(t, ()) for p, o in wanted.items()]
        self.served.pend(keys, 1)
        self._pass = []
        try:
            yield
            kept, self._pass = self._pass, None
            for served in kept:
                self.record(*served)
        finally:
            self.served.pend(keys, -1)

    def lost_since(self, group: str, topic: str, partition: int) -> bool:
        """Whether the holder lost ``partition`` of ``topic`` in ``group`` since the fetch was read."""
        return any(g == group and (hs is None or self.holder in hs) and (ps is None or (topic, partition) in ps)
                   for g, hs, ps in self.losses)


class ServedRecords:
    """Per (group, topic, partition) of a topic's incarnation: the span of offsets served since the
    group's last commit covering it, and whom to. Bounded by the partitions members read: an entry
    goes once a commit covers it or its holders lose the partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._served: dict[tuple[str, str, str, int], _Served] = {}  # (group, topic, location, partition)
        self._readings: list[weakref.ref[Reading]] = []  # fetches that may still record (while referenced)
        # (group, topic, partition, fetch offset) -> fetches being read from there: no location (a
        # fetch's is known once it read its view), so a topic's every incarnation counts them
        self._pending: dict[tuple[str, str, int, int], int] = {}

    def reading(self, holder: Holder, groups: dict[str, list[str]]) -> Reading:
        """A fetch of ``holder`` as a member of ``groups`` (per topic), read now (on the event loop)."""
        out = Reading(self, holder, groups)
        with self._lock:
            self._readings = [r for r in self._readings if r() is not None] + [weakref.ref(out)]
        return out

    def pend(self, keys: list[tuple[str, str, int, int]], step: int) -> None:
        """Count fetches being read from (group, topic, partition, fetch offset) up or down."""
        with self._lock:
            for key in keys:
                left = self._pending.get(key, 0) + step
                if left > 0:
                    self._pending[key] = left
                else:
                    self._pending.pop(key, None)

    def record(self, groups: Iterable[str], topic: str, location: str, partition: int, start: int, end: int,
               holder: Holder, reading: Reading | None = None) -> None:
        """Records of ``[start, end)`` of ``partition`` served to ``holder``, a member of ``groups``
        (when ``reading`` was read: not in a group where the holder lost the partition since)."""
        if end <= start:
            return
        with self._lock:
            for group in groups:
                if reading is not None and reading.lost_since(group, topic, partition):
                    continue
                entry = self._served.setdefault((group, topic, location, partition), _Served(start, end))
                entry.low, entry.high = min(entry.low, start), max(entry.high, end)
                entry.holders.add(holder)

    def held(self, group: str, topic: str, location: str, committed: dict[int, int]) -> dict[int, int]:
        """Per partition where a member of ``group`` may hold records above its ``committed`` offset
        (absent: never committed): the lowest offset it may hold. Entries a commit covers are dropped."""
        out = {}
        with self._lock:
            for key in [k for k in self._served if k[:3] == (group, topic, location)]:
                entry, at = self._served[key], committed.get(key[3])
                if at is not None and at >= entry.high:
                    del self._served[key]
                    continue
                out[key[3]] = entry.low if at is None else max(entry.low, at)
            for g, t, p, offset in self._pending:
                if (g, t) == (group, topic):
                    low = offset if committed.get(p) is None else max(offset, committed[p])
                    out[p] = min(out.get(p, low), low)
        return out

    def lost(self, group: str, holders: set[Holder] | None, partitions: set[tuple[str, int]] | None = None) -> None:
        """``holders`` of ``group`` (None: all) lost ``partitions`` (topic, partition; None: every one):
        what they were served there is no longer theirs to deliver. An entry goes once none of its
        holders is left. Fetches being read are told (``Reading``)."""
        with self._lock:
            self._tell(group, holders, partitions)
            for key in [k for k in self._served if k[0] == group]:
                if partitions is not None and (key[1], key[3]) not in partitions:
                    continue
                entry = self._served[key]
                entry.holders -= entry.holders if holders is None else holders
                if not entry.holders:
                    del self._served[key]

    def forget(self, group: str) -> None:
        """Drop every entry of ``group`` (deleted, or its offsets set from outside it)."""
        with self._lock:
            self._tell(group, None, None)
            for key in [k for k in self._served if k[0] == group]:
                del self._served[key]

    def _tell(self, group: str, holders: set[Holder] | None, partitions: set[tuple[str, int]] | None) -> None:
        loss = (group, None if holders is None else frozenset(holders),
                None if partitions is None else frozenset(partitions))
        for ref in self._readings:
            reading = ref()
            if reading is not None:
                reading.losses.append(loss)
