"""Go's Kafka clients, run against a server: each program under tests/serve/go/ (one module, its
dependencies pinned by go.mod and go.sum) built on first use into .go-clients/ (never committed),
and again whenever its sources change, as Kafka's jars are resolved into .jars-kafka/."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.support import PROJECT

SOURCES = Path(__file__).parent / "go"
BUILT = PROJECT / ".go-clients"


def go_client(name: str) -> Path:
    """The binary of ``tests/serve/go/<name>``, built if its sources (and go.mod, go.sum) changed
    since its last build. The Go toolchain fetches the pinned modules through its proxy."""
    if shutil.which("go") is None:
        raise AssertionError("the Go toolchain is not on PATH: install Go (go.mod says which version) to build "
                             f"tests/serve/go/{name}")
    files = sorted([SOURCES / "go.mod", SOURCES / "go.sum", *(SOURCES / name).glob("*.go")])
    digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()
    BUILT.mkdir(exist_ok=True)
    binary, stamp = BUILT / name, BUILT / f"{name}.built"
    with open(BUILT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time, whoever asks
        if not binary.exists() or not stamp.exists() or stamp.read_text() != digest:
            proc = subprocess.run(["go", "build", "-mod=readonly", "-o", str(binary), f"./{name}"], cwd=SOURCES,
                                  capture_output=True, text=True, timeout=900, env={**os.environ, "CGO_ENABLED": "0"})
            if proc.returncode != 0:
                raise AssertionError(f"go build of tests/serve/go/{name} failed:\n{proc.stdout}\n{proc.stderr}")
            stamp.write_text(digest)
    return binary
