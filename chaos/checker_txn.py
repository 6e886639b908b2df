"""The checker's rules for a log with transactions, read with delta-rs only, as ``chaos.checker``
(it knows only the on-disk format, docs/storage-format.md): a marker is a log row whose
``control`` is ``commit`` or ``abort`` (null, or no such column, on a record); per partition and
transactional producer id the application version ``lakelog.txn.mark.<p>.<id>`` is ``2 * first +
1`` while a transaction is open there from offset ``first``.

A marker is no record: never owed to a group, never a key's record, never a producer's sequence;
its offset is taken (the log's offsets stay dense). A transactional record is *committed* or
*aborted* by its producer's next marker after it in its partition, *open* while none follows (its
producer's mark is open at or below it). A partition's last stable offset is its earliest open
transaction's first offset (else past its end). A group that read read_committed owes the records
below it that no aborted transaction wrote, and may deliver none other (``aborted_delivered``,
``open_delivered``); a read_uncommitted one owes every record. No group delivers a marker
(``marker_delivered``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from deltalake import DeltaTable

CONTROL = "control"
COMMITTED, ABORTED, OPEN, MARKER = "committed", "aborted", "open", "marker"
NO_END = 2**62


def is_marker(row: dict) -> bool:
    return row.get(CONTROL) is not None


def open_firsts(location: str, log: list[dict]) -> dict[tuple[int, str], int]:
    """(partition, producer id) -> the first offset of the producer's transaction open there, from
    the log's application versions (for each producer id the log's rows name)."""
    table = DeltaTable(location)
    out = {}
    for p, pid in sorted({(r["partition"], r["producer_id"]) for r in log if r["producer_id"] is not None}):
        mark = table.transaction_version(f"lakelog.txn.mark.{p}.{pid}")
        if mark is not None and mark % 2 == 1:
            out[(p, pid)] = (mark - 1) // 2
    return out


def states(log: list[dict], opened: dict[tuple[int, str], int] | None = None,
           markers: bool = False) -> dict[tuple[int, int], str]:
    """(partition, offset) -> committed, aborted or open, of each transactional record of ``log``
    (its rows as appended): its producer's next marker after it in its partition decides; while
    none follows it is open where its producer's mark (``opened``: ``open_firsts``) is open at or
    below it, else a plain record (absent). With ``opened`` None (the markers alone) every record
    no marker follows is open. Markers are absent, or ``MARKER`` with ``markers``."""
    ends: dict[tuple[int, str], list[tuple[int, bool]]] = defaultdict(list)
    for r in log:
        if is_marker(r):
            ends[(r["partition"], r["producer_id"])].append((r["offset"], r[CONTROL] == "commit"))
    for found in ends.values():
        found.sort()
    out = {}
    for r in log:
        ident, key = (r["partition"], r["offset"]), (r["partition"], r["producer_id"])
        if is_marker(r):
            if markers:
                out[ident] = MARKER
            continue
        after = next((commit for offset, commit in ends.get(key, ()) if offset > r["offset"]), None)
        if after is not None:
            out[ident] = COMMITTED if after else ABORTED
        elif opened is None or (key in opened and opened[key] <= r["offset"]):
            out[ident] = OPEN
    return out


def stable_ends(opened: dict[tuple[int, str], int]) -> dict[int, int]:
    """Partition -> its last stable offset, where a transaction is open."""
    out: dict[int, int] = {}
    for (p, _pid), first in opened.items():
        out[p] = min(out.get(p, NO_END), first)
    return out


def owed(row: dict, state: dict[tuple[int, int], str], stable: dict[int, int], committed: bool) -> bool:
    """Whether a group owes ``row`` (a log row): never a marker; under read_committed
    (``committed``) a record below its partition's last stable offset that no aborted transaction wrote."""
    if is_marker(row):
        return False
    if not committed:
        return True
    return state.get((row["partition"], row["offset"])) != ABORTED and row["offset"] < stable.get(row["partition"], NO_END)


def forbidden(row: dict, state: dict[tuple[int, int], str], stable: dict[int, int], committed: bool) -> str | None:
    """The anomaly of delivering the log row ``row`` (None: none): a marker, or under read_committed
    an aborted transaction's record or one at or past its partition's last stable offset."""
    if is_marker(row):
        return "marker_delivered"
    if not committed:
        return None
    if state.get((row["partition"], row["offset"])) == ABORTED:
        return "aborted_delivered"
    if row["offset"] >= stable.get(row["partition"], NO_END):
        return "open_delivered"
    return None


@dataclass(frozen=True)
class Transactions:
    """A log's transactions (``states``, ``stable_ends``) and the isolation level a group read at."""

    state: dict[tuple[int, int], str] = field(default_factory=dict)
    stable: dict[int, int] = field(default_factory=dict)
    committed: bool = False

    @classmethod
    def of(cls, location: str, log: list[dict]) -> "Transactions":
        opened = open_firsts(location, log)
        return cls(states(log, opened), stable_ends(opened))

    def reading(self, committed: bool) -> "Transactions":
        return replace(self, committed=committed)

    def owed(self, row: dict) -> bool:
        return owed(row, self.state, self.stable, self.committed)

    def forbidden(self, row: dict) -> str | None:
        return forbidden(row, self.state, self.stable, self.committed)


def committed_view(log: list[dict], opened: dict[tuple[int, str], int]) -> list[dict]:
    """What a read_committed reader of the whole log delivers, in (partition, offset) order."""
    state, stable = states(log, opened), stable_ends(opened)
    return sorted((r for r in log if owed(r, state, stable, True)), key=lambda r: (r["partition"], r["offset"]))


def output_problems(log: list[dict], opened: dict[tuple[int, str], int], want: list[str], suffix: str = "",
                    delivered: list[tuple[int, int]] | None = None) -> list[str]:
    """What a read-process-write job's output log (``log``, as appended) breaks of what
    transactions promise: the committed records' values (less ``suffix``) are ``want`` each
    exactly once (each committed transaction whole, none twice, no aborted one); no transaction is
    left open; ``delivered`` (the (partition, offset)s a read_committed reader of lakelog
    delivered) is exactly the committed view."""
    view = committed_view(log, opened)
    out = []
    got = defaultdict(int)
    for r in view:
        got[_text(r["value"]).removesuffix(suffix)] += 1
    missing = sorted(v for v in want if v not in got)
    twice = sorted(v for v, n in got.items() if n > 1)
    extra = sorted(v for v in got if v not in set(want))
    if missing:
        out.append(f"{len(missing)} input records not committed, first {missing[:5]}")
    if twice:
        out.append(f"{len(twice)} input records committed more than once, first {twice[:5]}")
    if extra:
        out.append(f"{len(extra)} committed records no input names, first {extra[:5]}")
    if opened:
        out.append(f"transactions left open: {sorted(opened.items())}")
    if delivered is not None:
        expect = [(r["partition"], r["offset"]) for r in view]
        if sorted(delivered) != expect:
            wrong = sorted(set(delivered) ^ set(expect))
            out.append(f"a read_committed reader delivered {len(delivered)} records, the committed view has "
                       f"{len(expect)}; differing at {wrong[:5]}")
    return out


def _text(value) -> str:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray, memoryview)) else str(value)
