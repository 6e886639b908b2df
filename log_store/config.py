"""Typed configuration, loaded from ``conf/<env>.yaml`` and validated with pydantic.

Lives at the bottom layer because the session factory needs it; the upper layers read their
own sections from the same model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from log_store.errors import InvalidConfigurationError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"
DEFAULT_ROOT = "./lakelog-data"
ROOT_ENV = "LAKELOG_ROOT"
CONF_ENV = "LAKELOG_CONF"
DELETE_PARTITION_ENV = "LAKELOG_DELETE_PARTITION_ENABLE"
SPARK_PROFILE_ENV = "LAKELOG_SPARK_PROFILE"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkSettings(_Strict):
    """How the session factory builds Spark for this environment."""

    mode: Literal["local", "cluster", "databricks"] = "local"
    master: str | None = "local[2]"
    app_name: str = "lakelog"
    jars_dir: str = ".jars"
    packages: list[str] = Field(
        default_factory=lambda: ["io.delta:delta-spark_2.12:3.3.2"]
    )
    # "small": for many short jobs sharing one machine (group members, scheduled micro-jobs):
    # one core, 1 GB, quick-start JIT and no whole-stage codegen. About twice as fast on tiny
    # control-plane queries when four such JVMs share two cores; slower on big scans.
    profile: Literal["standard", "small"] = "standard"
    conf: dict[str, str] = Field(default_factory=dict)


class ProducerSettings(_Strict):
    batch_size: int = Field(default=500_000, ge=1)
    max_retries: int = Field(default=20, ge=0)
    retry_backoff_ms: int = Field(default=50, ge=0)


class ConsumerSettings(_Strict):
    max_records_per_batch: int = Field(default=500_000, ge=1)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"


ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")


class GroupSettings(_Strict):
    """Consumer-group membership (Kafka's group.* and partition.assignment.strategy settings)."""

    protocol: Literal["eager", "cooperative"] = "eager"
    assignor: Literal["range", "roundrobin", "sticky", "cooperative-sticky"] = "range"
    session_timeout_ms: int = Field(default=20_000, ge=100)
    heartbeat_interval_ms: int = Field(default=2_000, ge=10)
    rebalance_timeout_ms: int = Field(default=60_000, ge=100)
    # Two-phase hand-over: a partition moving to this member is first a warm-up copy until the
    # member is within ``warmup_max_lag`` records of the owner's committed position.
    warmup: bool = False
    warmup_max_lag: int = Field(default=1_000, ge=0)

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> "GroupSettings":
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"session_timeout_ms ({self.session_timeout_ms}) must be longer than heartbeat_interval_ms "
                f"({self.heartbeat_interval_ms}), or members are expelled between heartbeats"
            )
        return self


class ControllerSettings(_Strict):
    """The topic controller: Kafka's ``delete.topic.partition.enable`` switch and retirement delay.

    Shrinking a topic is off by default because it retires partitions; a marked partition is
    retired once drained or ``delete_delay_seconds`` after it was marked (its undelivered
    records are then dropped).
    """

    delete_partition_enable: bool = False
    delete_delay_seconds: float = Field(default=86_400.0, ge=0)


class LakelogConfig(_Strict):
    root: str = DEFAULT_ROOT
    spark: SparkSettings = SparkSettings()
    producer: ProducerSettings = ProducerSettings()
    consumer: ConsumerSettings = ConsumerSettings()
    controller: ControllerSettings = ControllerSettings()
    group: GroupSettings = GroupSettings()


def load_config(path: str | os.PathLike | None = None, root: str | None = None) -> LakelogConfig:
    """Load a config file (default ``$LAKELOG_CONF`` or ``conf/local.yaml``).

    ``root`` (or ``$LAKELOG_ROOT``) overrides the file's root; ``$LAKELOG_DELETE_PARTITION_ENABLE``
    overrides ``controller.delete_partition_enable``, ``$LAKELOG_SPARK_PROFILE`` ``spark.profile``. Errors name the offending key.
    """
    chosen = path or os.environ.get(CONF_ENV) or CONF_DIR / "local.yaml"
    file = Path(chosen)
    try:
        raw = yaml.safe_load(file.read_text()) or {}
    except OSError as exc:
        raise InvalidConfigurationError(
            f"cannot read configuration file {file}: {exc.strerror}; pass an existing file with --conf"
        ) from exc
    except yaml.YAMLError as exc:
        raise InvalidConfigurationError(f"configuration file {file} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidConfigurationError(
            f"configuration file {file} must hold a mapping of keys, got {type(raw).__name__}"
        )
    override = root or os.environ.get(ROOT_ENV)
    if override:
        raw = {**raw, "root": override}
    switch = os.environ.get(DELETE_PARTITION_ENV)
    section = raw.get("controller") or {}
    if switch is not None and isinstance(section, dict):  # the environment beats the file
        raw = {**raw, "controller": {**section, "delete_partition_enable": switch}}
    profile = os.environ.get(SPARK_PROFILE_ENV)
    spark_section = raw.get("spark") or {}
    if profile and isinstance(spark_section, dict):
        raw = {**raw, "spark": {**spark_section, "profile": profile}}
    try:
        return LakelogConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"key '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}" for err in exc.errors()
        )
        raise InvalidConfigurationError(f"invalid configuration in {file}: {problems}") from exc
