"""Controller processes the tests kill and race. Each builds its own Spark session (its own JVM).

Usage: controller_workers.py alter ROOT TOPIC N [BARRIER_DIR NAME PEERS]
       controller_workers.py create ROOT TOPIC,TOPIC,... N BARRIER_DIR NAME PEERS
       controller_workers.py tick ROOT TOPIC DELAY
       controller_workers.py delete ROOT TOPIC
With $LAKELOG_CRASH_AT=<step> the controller dies at that step (exit code 86). Attaches to the
test run's JVM (chaos.host) when $LAKELOG_CHAOS_GATEWAY is set.
With a barrier, the worker warms up, then waits until PEERS workers are ready before acting.
Prints one JSON line with the result; a lakelog error is printed as {"error": ...}, exit code 1.
"""

from __future__ import annotations

import faulthandler
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chaos.host import session  # noqa: E402
from control_plane.settings import ControllerSettings  # noqa: E402
from log_store.errors import LakelogError  # noqa: E402


def _controller(root: str):
    from control_plane.controller import TopicController

    return TopicController(session(), root, ControllerSettings(delete_partition_enable=True))


def _barrier(folder: str, name: str, peers: int) -> None:
    Path(folder, name).touch()
    while len(list(Path(folder).iterdir())) < peers:
        time.sleep(0.02)


def alter(root: str, topic: str, n: str, barrier: str = "", name: str = "", peers: str = "0") -> None:
    controller = _controller(root)
    controller.resume(topic)  # warm up the JVM's Delta paths before the race
    if barrier:
        _barrier(barrier, name, int(peers))
    print(controller.alter(topic, int(n)).model_dump_json(), flush=True)


def create(root: str, topics: str, n: str, barrier: str, name: str, peers: str) -> None:
    """Create each topic in turn, racing the peers: all start each create together (a lakelog
    error is printed and the next topic follows)."""
    faulthandler.dump_traceback_later(200)  # a worker stuck in the race shows where
    from control_plane.topics import TopicAdmin

    admin = TopicAdmin(session(), root)
    admin.current()  # warm up the JVM's Delta paths before the race
    _barrier(barrier, name, int(peers))
    for i, topic in enumerate(topics.split(",")):
        step = Path(barrier, f"step-{i}")
        step.mkdir(exist_ok=True)
        _barrier(str(step), name, int(peers))
        try:
            print(json.dumps({"created": admin.create(topic, int(n)).topic}), flush=True)
        except LakelogError as exc:
            print(json.dumps({"topic": topic, "error": type(exc).__name__, "message": str(exc)}), flush=True)


def tick(root: str, topic: str, delay: str) -> None:
    print(json.dumps([r.model_dump(mode="json") for r in _controller(root).tick(topic, float(delay))]), flush=True)


def delete(root: str, topic: str) -> None:
    print(_controller(root).delete(topic).model_dump_json(), flush=True)


if __name__ == "__main__":
    try:
        {"alter": alter, "create": create, "tick": tick, "delete": delete}[sys.argv[1]](*sys.argv[2:])
    except LakelogError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        sys.exit(1)
