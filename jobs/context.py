"""What every command shares: the run's configuration and Spark session (built lazily, once),
the ``--json`` option, progress bars, and the way errors end a command (one line, exit 1)."""

from __future__ import annotations

from functools import cached_property

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobs.output import stderr
from jobs.config import LakelogConfig, load_config
from log_store.errors import LakelogError, RetriableError


class Context:
    """Lazily built configuration and Spark session shared by the commands of one run."""

    def __init__(self, conf: str | None, root: str | None) -> None:
        self.conf_path = conf
        self.root_override = root

    @cached_property
    def config(self) -> LakelogConfig:
        return load_config(self.conf_path, self.root_override)

    @property
    def root(self) -> str:
        return self.config.root

    @cached_property
    def spark(self):
        from log_store.session import build_session

        return build_session(self.config.spark)

    def topic_admin(self):
        from control_plane.topics import TopicAdmin

        return TopicAdmin(self.spark, self.root)

    def controller(self, delete_partition_enable: bool | None = None):
        from control_plane.controller import TopicController

        settings = self.config.controller
        if delete_partition_enable is not None:
            settings = settings.model_copy(update={"delete_partition_enable": delete_partition_enable})
        return TopicController(self.spark, self.root, settings)

    def group_settings(self, overrides: dict):
        """The configuration's group settings with the command line's overrides, validated."""
        from pydantic import ValidationError

        from control_plane.settings import GroupSettings
        from log_store.errors import InvalidConfigurationError

        merged = {**self.config.group.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
        try:
            return GroupSettings.model_validate(merged)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'group'}: {e['msg']}"
                + (f" (got {e['input']!r})" if e["loc"] else "")
                for e in exc.errors()
            )
            raise InvalidConfigurationError(f"invalid group settings: {problems}") from None


pass_ctx = click.make_pass_decorator(Context)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def progress_bar(label: str) -> Progress:
    return Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=stderr, transient=False
    )


class LakelogGroup(click.Group):
    """Turns lakelog's errors into a one-line message and exit code 1, for every subcommand."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LakelogError as exc:
            hint = " (retriable: nothing was half-written; run the command again)" if isinstance(exc, RetriableError) else ""
            stderr.print(f"error: {type(exc).__name__}: {exc}{hint}", style="bold red", highlight=False, markup=False,
                         soft_wrap=True)
            ctx.exit(1)
