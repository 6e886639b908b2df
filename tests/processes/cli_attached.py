"""``lakelog ARGS`` in a process of its own, attached to a running JVM (``chaos.host``): the command
line as a user runs it (its options, its exit code, its one-line errors) without starting a JVM
per command (about 3 s instead of 20). The gateway is ``$LAKELOG_CHAOS_GATEWAY``.

Usage: cli_attached.py [lakelog's arguments]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from chaos.host import attach
    from jobs.cli import cli
    from jobs.context import Context

    context = Context(None, None)
    context.__dict__["spark"] = attach()  # Context.spark, made already (a cached property)
    cli.main(sys.argv[1:], obj=context, prog_name="lakelog")


if __name__ == "__main__":
    main()
