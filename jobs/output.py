"""How read commands print: a rich table for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

stdout = Console()
stderr = Console(stderr=True)


def emit(rows: Iterable[dict[str, Any]] | dict[str, Any], as_json: bool, title: str | None = None) -> None:
    """Print ``rows`` as a table (or one record as key/value pairs), or as JSON."""
    if as_json:
        sys.stdout.write(json.dumps(rows, default=str, indent=2) + "\n")
        return
    if isinstance(rows, dict):
        table = Table(title=title, show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        for k, v in rows.items():
            table.add_row(str(k), str(v))
        stdout.print(table)
        return
    rows = list(rows)
    table = Table(title=title)
    if not rows:
        stdout.print(f"{title or 'result'}: (none)")
        return
    for col in rows[0]:
        table.add_column(str(col))
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    stdout.print(table)
