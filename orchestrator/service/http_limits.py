"""`HttpLimits`: the connection limits of `trialbox serve` (their defaults are in
`common/defaults.py`, for the CLI's help), as a model the CLI can build without the `serve`
extra (`http_protocol.py` enforces them under uvicorn)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.common.defaults import (
    DEFAULT_HEADER_TIMEOUT_SEC,
    DEFAULT_KEEP_ALIVE_TIMEOUT_SEC,
    default_max_connections,
)


class HttpLimits(BaseModel):
    """The connection limits `serve` runs uvicorn with; `http_protocol.py`'s docstring says
    what each one promises."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    header_timeout: float = Field(DEFAULT_HEADER_TIMEOUT_SEC, gt=0)
    keep_alive_timeout: float = Field(DEFAULT_KEEP_ALIVE_TIMEOUT_SEC, gt=0)
    max_connections: int = Field(default_factory=default_max_connections, gt=0)
