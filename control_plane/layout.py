"""Where everything lives under one root (a local path or a URI)."""

from __future__ import annotations

import os
from pathlib import Path

from log_store.errors import StorageError
from log_store.files import is_remote, local_path


class RootLayout:
    """``<root>/control/<table>`` for the control plane, ``<root>/topics/<topic>`` for logs,
    ``<root>/staging/<write>`` for a Spark write's rows between its tasks and its commit."""

    def __init__(self, root: str) -> None:
        self.is_local = not is_remote(root)
        self.root = str(local_path(root)) if self.is_local else root.rstrip("/")

    def control(self, table: str) -> str:
        return f"{self.root}/control/{table}"

    def topic(self, name: str) -> str:
        return f"{self.root}/topics/{name}"

    def staging(self, write: str) -> str:
        return f"{self.root}/staging/{write}"

    def check_writable(self) -> None:
        """Fail early, before any commit, if a local root cannot be written."""
        if not self.is_local:
            return
        path = Path(self.root)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create root {path}: {exc.strerror}; pass a writable --root") from exc
        if not os.access(path, os.W_OK | os.X_OK):
            raise StorageError(f"root {path} is not writable; pass a writable --root or fix its permissions")
