"""The configuration file's model (every layer's settings in one YAML) and how it is loaded.

Lives at the top because it composes the settings each layer keeps beside itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import ValidationError

from control_plane.settings import ControllerSettings, GroupSettings, ReplicationSettings
from log_store.config import PROJECT_ROOT, SparkSettings, Strict
from log_store.errors import InvalidConfigurationError
from pipelines.settings import ConsumerSettings, ProducerSettings
from serve.settings import ServeSettings

CONF_DIR = PROJECT_ROOT / "conf"
DEFAULT_ROOT = "./lakelog-data"
ROOT_ENV = "LAKELOG_ROOT"
CONF_ENV = "LAKELOG_CONF"
DELETE_PARTITION_ENV = "LAKELOG_DELETE_PARTITION_ENABLE"
SPARK_PROFILE_ENV = "LAKELOG_SPARK_PROFILE"


class LakelogConfig(Strict):
    root: str = DEFAULT_ROOT
    spark: SparkSettings = SparkSettings()
    producer: ProducerSettings = ProducerSettings()
    consumer: ConsumerSettings = ConsumerSettings()
    controller: ControllerSettings = ControllerSettings()
    group: GroupSettings = GroupSettings()
    replication: ReplicationSettings = ReplicationSettings()
    serve: ServeSettings = ServeSettings()


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
