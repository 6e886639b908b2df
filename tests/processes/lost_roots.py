"""A root lost in each of the ways storage goes away, and ``lakelog`` commands run against it as
OS processes (``cli_attached.py``, on a JVM of the test's own).

Kinds of loss (``lose``):
- ``missing``: the root's folder is gone;
- ``not_a_directory``: a file stands where the folder was (nothing can be made under it);
- ``unmounted``: the folder is there and empty (a mount point with nothing mounted);
- ``refusing_access``: the folder is there with mode 000. The superuser ignores file modes, so
  when the tests run as root, every lakelog process of these tests (the JVM and the commands)
  runs without the capabilities that let it (``setpriv``: no CAP_DAC_OVERRIDE or
  CAP_DAC_READ_SEARCH), and the mode refuses it as it refuses any other user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import PROJECT

KINDS = ("missing", "not_a_directory", "unmounted", "refusing_access")
CLI = PROJECT / "tests" / "processes" / "cli_attached.py"
# A root process run as an ordinary user for file modes: without the capabilities that pass them.
AS_A_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def lose(root: Path, kind: str) -> Callable[[], None]:
    """Make ``root`` lost as ``kind`` says; returns what brings it back."""
    away = root.with_name(root.name + ".away")
    if kind == "refusing_access":
        root.chmod(0)
        return lambda: root.chmod(0o755)
    root.rename(away)
    if kind == "not_a_directory":
        root.write_text("a file where the root's folder was\n")
    elif kind == "unmounted":
        root.mkdir()
    else:
        assert kind == "missing", kind

    def back() -> None:
        if root.is_dir():
            root.rmdir()
        elif root.exists():
            root.unlink()
        away.rename(root)

    return back


def _cannot_refuse_access() -> str | None:
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return "running as root without setpriv: nothing makes a mode refuse the superuser"
    return None


def kind_param(kind: str, *marks):
    """``kind`` as a test parameter (skipped, saying why, where it cannot be made)."""
    reason = _cannot_refuse_access() if kind == "refusing_access" else None
    return pytest.param(kind, marks=[*marks, *([pytest.mark.skip(reason=reason)] if reason else [])], id=kind)


class Host:
    """A JVM (``chaos.host``) run as ``AS_A_USER``, for commands a mode must refuse."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([*AS_A_USER, sys.executable, "-m", "chaos.host"], cwd=PROJECT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the JVM host exited ({self.proc.wait()}) before it served")
        self.gateway = json.loads(line)["gateway"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


class Command:
    """One ``lakelog`` command running in its own process."""

    def __init__(self, gateway: str, args: list[str], log: Path, env: dict[str, str] | None = None,
                 as_a_user: bool = False) -> None:
        """``as_a_user``: run as ``AS_A_USER`` (with a JVM that is too: ``Host``)."""
        from chaos.host import GATEWAY_ENV

        self.args, self.log = args, log
        self.started = time.monotonic()
        prefix = AS_A_USER if as_a_user else []
        self.proc = subprocess.Popen([*prefix, sys.executable, str(CLI), *args], cwd=PROJECT, text=True,
                                     stdout=open(log.with_suffix(".out"), "w"), stderr=open(log, "w"),
                                     # a crash of the interpreter (a signal) leaves its threads' stacks in the log
                                     env={**os.environ, GATEWAY_ENV: gateway, "PYTHONFAULTHANDLER": "1", **(env or {})})

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"lakelog {' '.join(self.args)} still ran after {timeout} s:\n{self.stderr()[-3000:]}")

    def running(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return self.log.read_text()

    def stdout(self) -> str:
        return self.log.with_suffix(".out").read_text()

    def errors(self) -> list[str]:
        """The ``error:`` lines it printed."""
        return [line for line in self.stderr().splitlines() if line.startswith("error:")]

    def kill(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait()
