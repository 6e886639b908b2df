"""A topic's view in ``lakelog serve`` only moves forward: a pool thread that read an older
snapshot of the log never replaces the newer view another thread stored meanwhile (a fetch judged
by the older one was answered OFFSET_OUT_OF_RANGE at an offset the server had just served up to,
and librdkafka read the partition again from its earliest offset: seed 4002)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from serve.context import ServeContext


def _context(snapshots: list, gate: threading.Event, reading_older: threading.Event) -> ServeContext:
    ctx = object.__new__(ServeContext)
    ctx._lock, ctx._views, ctx._ids = threading.Lock(), {}, {}
    ctx._live = (frozenset({"t"}), 0.0)  # listed: "t" is a live topic
    ctx.replicated = lambda topic: False
    record = SimpleNamespace(topic="t", location="/root/topics/t", event=SimpleNamespace(removes_topic=False))
    ctx.admin = SimpleNamespace(get=lambda topic: record)

    def snapshot(path):
        version = snapshots.pop(0)
        if version == 5:
            reading_older.set()
            gate.wait(10)  # the slow read of the older snapshot
        return SimpleNamespace(version=version, metadata=SimpleNamespace(deleted=False)), "tid", "log-1"

    ctx.snapshot = snapshot
    return ctx


def test_a_slow_read_of_an_older_snapshot_never_replaces_a_newer_view():
    gate, reading_older = threading.Event(), threading.Event()
    ctx = _context([5, 6], gate, reading_older)
    seen = {}
    slow = threading.Thread(target=lambda: seen.setdefault("slow", ctx.view("t")))
    slow.start()
    assert reading_older.wait(10)
    fast = ctx.view("t")  # reads version 6 and stores it while the slow read waits
    gate.set()
    slow.join(10)
    assert fast.snapshot.version == 6
    assert ctx.view("t", max_age=60).snapshot.version == 6, "the cached view went back to an older snapshot"
    assert seen["slow"].snapshot.version == 6, "the slow reader is given the newer view"
