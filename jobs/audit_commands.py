"""`lakelog audit` and `lakelog topics timeline`: checking and picturing a topic's life."""

from __future__ import annotations

import click


def register(cli: click.Group, topics: click.Group) -> None:
    """Add this module's commands to the CLI."""
