"""What the runner's parts share: an actor process it started, and the limits it holds them to."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROJECT = Path(__file__).resolve().parents[1]
CRASH_EXIT = 86
ACTOR_TIMEOUT_S = 240.0
MEMBER_KINDS = ("member", "kafka_member")  # group members: they run until the drain stops them
LONG_RUNNING = (*MEMBER_KINDS, "serve")  # neither held to ACTOR_TIMEOUT_S nor waited for by the schedule's work


@dataclass
class Actor:
    name: str
    kind: str
    proc: subprocess.Popen
    started: float
    on_exit: Callable[[int], None]
    frozen: bool = False

