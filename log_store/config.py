"""Typed configuration, loaded from ``conf/<env>.yaml`` and validated with pydantic.

Lives at the bottom layer because the session factory needs it; the upper layers read their
own sections from the same model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from log_store.errors import InvalidConfigurationError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"
DEFAULT_ROOT = "./lakelog-data"
ROOT_ENV = "LAKELOG_ROOT"
CONF_ENV = "LAKELOG_CONF"


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
    conf: dict[str, str] = Field(default_factory=dict)


class ProducerSettings(_Strict):
    batch_size: int = Field(default=500_000, ge=1)
    max_retries: int = Field(default=20, ge=0)
    retry_backoff_ms: int = Field(default=50, ge=0)


class ConsumerSettings(_Strict):
    max_records_per_batch: int = Field(default=500_000, ge=1)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"


class LakelogConfig(_Strict):
    root: str = DEFAULT_ROOT
    spark: SparkSettings = SparkSettings()
    producer: ProducerSettings = ProducerSettings()
    consumer: ConsumerSettings = ConsumerSettings()


def load_config(path: str | os.PathLike | None = None, root: str | None = None) -> LakelogConfig:
    """Load a config file (default ``$LAKELOG_CONF`` or ``conf/local.yaml``).

    ``root`` (or ``$LAKELOG_ROOT``) overrides the file's root. Errors name the offending key.
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
    try:
        return LakelogConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"key '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}" for err in exc.errors()
        )
        raise InvalidConfigurationError(f"invalid configuration in {file}: {problems}") from exc
