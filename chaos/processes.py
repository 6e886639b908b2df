"""What the runner's parts share: an actor process it started, and the limits it holds them to."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROJECT = Path(__file__).resolve().parents[1]
CRASH_EXIT = 86
ACTOR_TIMEOUT_S = 240.0
# group members, the stream and the transactional copiers: they run until the drain stops them
MEMBER_KINDS = ("member", "kafka_member", "stream_read", "txn_copy")
LONG_RUNNING = (*MEMBER_KINDS, "serve")  # neither held to ACTOR_TIMEOUT_S nor waited for by the schedule's work


@dataclass
class Actor:
    name: str
    kind: str
    proc: subprocess.Popen
    started: float
    on_exit: Callable[[int], None]
    frozen: bool = False



def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, then theirs), read from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        out += children
        todo += children
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it, also those in process groups of their own
    (PySpark's worker daemon makes one): a driver that crashes takes its Python workers along."""
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
