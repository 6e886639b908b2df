"""Producer and consumer settings (the ``producer`` and ``consumer`` sections of the configuration)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from log_store.config import Strict


class ProducerSettings(Strict):
    batch_size: int = Field(default=500_000, ge=1)
    max_retries: int = Field(default=20, ge=0)
    retry_backoff_ms: int = Field(default=50, ge=0)


class ConsumerSettings(Strict):
    max_records_per_batch: int = Field(default=500_000, ge=1)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
