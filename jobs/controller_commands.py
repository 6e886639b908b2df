"""`lakelog topics alter`, `lakelog controller tick`: the controller's commands."""

from __future__ import annotations

import click


def register(cli: click.Group, topics: click.Group) -> None:
    """Add this module's commands to the CLI."""
