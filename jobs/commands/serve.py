"""``lakelog serve``: Kafka's wire protocol in front of the root (docs/serve.md), until stopped."""

from __future__ import annotations

import json

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import stderr


@click.command("serve")
@click.option("--listen", default=None, help="HOST:PORT to listen on (serve.listen; default 127.0.0.1:9092).")
@click.option("--advertised", default=None, help="HOST:PORT clients are told to connect to (default: --listen's).")
@click.option("--node-id", type=int, default=None, help="This server's broker id (default: allocated through the root).")
@click.option("--linger-ms", type=int, default=None, help="How long a topic's batches gather into one commit.")
@json_option
@pass_ctx
def serve(c: Context, listen: str | None, advertised: str | None, node_id: int | None, linger_ms: int | None,
          as_json: bool) -> None:
    """Serve Kafka's clients (producers, consumers, groups, admin tools) from the root until
    SIGTERM or Ctrl-C. Several servers may serve one root."""
    from pydantic import ValidationError

    from log_store.errors import InvalidConfigurationError
    from serve.server import Server

    given = {"listen": listen, "advertised": advertised, "node_id": node_id, "linger_ms": linger_ms}
    try:
        settings = c.config.serve.model_validate({**c.config.serve.model_dump(), **{k: v for k, v in given.items() if v is not None}})
    except ValidationError as exc:
        problem = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InvalidConfigurationError(f"invalid serve settings: {problem}") from None
    server = Server(c.spark, c.root, settings, c.config.controller, c.config.replication)

    def listening(s: Server) -> None:
        host, port = s.advertised
        if as_json:
            click.echo(json.dumps({"listening": f"{s.host}:{s.port}", "advertised": f"{host}:{port}",
                                   "node_id": s.ctx.node_id, "root": c.root}), nl=True)
        else:
            stderr.print(f"lakelog serve: node {s.ctx.node_id} on {s.host}:{s.port} (advertised {host}:{port}), "
                         f"root {c.root}; Ctrl-C stops", highlight=False, markup=False, soft_wrap=True)

    server.run_forever(listening)
