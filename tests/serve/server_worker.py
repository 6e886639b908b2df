"""A lakelog server in a process of its own, attached to the test run's JVM (chaos.host), for
tests that kill it: ``server_worker.py ROOT NODE_ID [SETTING=VALUE ...]`` prints one JSON line
(``{"port": ...}``) once listening and serves until killed or SIGTERM. A value in brackets or braces
is JSON (``acls=[...]``)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from chaos.host import session
    from serve.server import Server
    from serve.settings import ServeSettings

    logging.basicConfig(level=logging.WARNING)
    root, node = sys.argv[1], int(sys.argv[2])
    given = {k: json.loads(v) if v[:1] in "[{" else v for k, v in (arg.split("=", 1) for arg in sys.argv[3:])}
    settings = ServeSettings.model_validate({"listen": "127.0.0.1:0", "node_id": node, **given})
    server = Server(session(), root, settings)
    server.run_forever(lambda s: print(json.dumps({"port": s.port, "node_id": s.ctx.node_id}), flush=True))


if __name__ == "__main__":
    main()
