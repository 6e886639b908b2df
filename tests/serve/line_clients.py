"""Kafka clients in processes of their own, driven line by line on standard input, each answering
in JSON lines on standard output: idempotent Java producers (tests/serve/java/StaleProducers.java)
and IBM's sarama (tests/serve/go/sarama-producer)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path


class LineClient:
    """A client process: lines told, JSON answers asked for; every send's outcome (an ``acked`` or
    ``failed`` event) is kept in ``outcomes`` as it passes."""

    def __init__(self, command: list[str], err: Path) -> None:
        self.err = err
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(err, "wb"),
                                     text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True).start()
        self.outcomes: list[dict] = []

    def tell(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def ask(self, line: str, answer: str) -> dict:
        """Send ``line``; the first JSON line whose event is ``answer`` (outcomes on the way are kept)."""
        self.tell(line)
        deadline = time.monotonic() + 120
        while True:
            try:
                out = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {answer} for {line!r}: {self.err.read_text()[-3000:]}") from None
            if out.startswith("{"):
                event = json.loads(out)
                if event["event"] in ("acked", "failed"):
                    self.outcomes.append(event)
                if event["event"] == answer:
                    return event

    def count(self, *name: str) -> int:
        """The topic's partition count in the (named) producer's metadata."""
        return self.ask(" ".join(["count", *name]), "count")["count"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.ask("quit", "closed")
        self.proc.wait(60)


def java_producers(boot: str, topic: str, folder: Path) -> LineClient:
    """Idempotent Java producers (tests/serve/java/StaleProducers.java): ``new NAME MAX_AGE_MS``
    makes one whose partitioner sends every record to the last partition it knows of, ``new NAME
    MAX_AGE_MS kafka`` one with Kafka's default partitioner."""
    from tests.serve.group_resize import java

    source = Path(__file__).parent / "java" / "StaleProducers.java"
    return LineClient([*java(), str(source), boot, topic], folder / "producers.err")


def sarama_producer(boot: str, topic: str, folder: Path, *flags: str) -> LineClient:
    """An IBM/sarama async producer with its default (FNV-1a hash) partitioner
    (tests/serve/go/sarama-producer: ``-max-messages``, ``-refresh``, ``-idempotent``)."""
    from tests.serve.go_clients import go_client

    return LineClient([str(go_client("sarama-producer")), "-bootstrap", boot, "-topic", topic, *flags],
                      folder / "sarama.err")
