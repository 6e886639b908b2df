"""`lakelog topics alter`, `lakelog controller tick`: the controller's commands."""

from __future__ import annotations

import click


def register(cli: click.Group, topics: click.Group) -> None:
    """Add this module's commands to the CLI."""
    # jobs.cli imports this module at its end, after defining these helpers.
    from jobs.cli import Context, _admin, json_option, pass_ctx
    from jobs.output import emit, stderr

    def controller(c: Context, delete_partition_enable: bool | None = None):
        from control_plane.controller import TopicController

        settings = c.config.controller
        if delete_partition_enable is not None:
            settings = settings.model_copy(update={"delete_partition_enable": delete_partition_enable})
        return TopicController(c.spark, c.root, settings)

    @topics.command("alter")
    @click.option("--topic", required=True)
    @click.option("--partitions", required=True, type=int, help="The new number of undeleted partitions.")
    @click.option("--delete-partition-enable/--no-delete-partition-enable", default=None,
                  help="Allow shrinking (default: controller.delete_partition_enable or $LAKELOG_DELETE_PARTITION_ENABLE).")
    @json_option
    @pass_ctx
    def topics_alter(c: Context, topic: str, partitions: int, delete_partition_enable: bool | None, as_json: bool) -> None:
        """Grow TOPIC to N partitions, or shrink it (marks partitions >= N for deletion; needs the switch).

        Re-running a killed alter finishes it.
        """
        c.config  # validate configuration before touching Spark
        result = controller(c, delete_partition_enable).alter(topic, partitions)
        d = _admin(c).describe(topic)
        if as_json:
            emit({"result": result.model_dump(mode="json"), "topic": d.model_dump(mode="json")}, True)
            return
        if result.note:
            stderr.print(result.note, highlight=False, markup=False)
        emit({k: v for k, v in d.model_dump(mode="json").items() if k != "partitions"}, False, f"topic {topic}")
        emit([p.model_dump(mode="json") for p in d.partitions], False, "partitions")

    @cli.group("controller")
    def controller_group() -> None:
        """The topic controller's periodic work."""

    @controller_group.command("tick")
    @click.option("--topic", default=None, help="Only this topic (default: every topic).")
    @click.option("--delete-delay", type=float, default=None,
                  help="Seconds after marking when a partition is retired even if not drained "
                       "(default: controller.delete_delay_seconds).")
    @json_option
    @pass_ctx
    def controller_tick(c: Context, topic: str | None, delete_delay: float | None, as_json: bool) -> None:
        """Finish interrupted changes, retire drained or expired marked partitions, delete their rows."""
        c.config
        results = controller(c).tick(topic, delete_delay)
        rows = [r.model_dump(mode="json") for r in results]
        emit(rows if as_json else [{k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()}
                                   for r in rows], as_json, "controller tick")
