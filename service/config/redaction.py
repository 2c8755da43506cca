"""The only form of a loaded config that may be displayed or logged."""

from __future__ import annotations

from typing import Any

from runtime.logging import redact
from service.config.model import FloeConfig


def redacted_dict(config: FloeConfig) -> dict[str, Any]:
    """The configuration as plain data for ``floe check``: defaults filled in, every secret masked."""
    return redact(config.model_dump(mode="json", by_alias=True))
