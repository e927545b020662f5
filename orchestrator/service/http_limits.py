"""`HttpLimits`: the connection limits of `trialbox serve` and their defaults, as a model the
CLI can build without the `serve` extra (`http_protocol.py` enforces them under uvicorn)."""

from __future__ import annotations

import resource

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_HEADER_TIMEOUT_SEC = 10.0
DEFAULT_KEEP_ALIVE_TIMEOUT_SEC = 5.0
MAX_CONNECTIONS_CEILING = 1000


def default_max_connections() -> int:
    """1000, or a quarter of the descriptor limit (`ulimit -n`) when that is lower: the rest
    stays for what the server opens itself (the engine's sockets, trial logs, gateway slots),
    and even the hard ceiling (twice this) keeps half of the limit free."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS_CEILING
    return max(1, min(MAX_CONNECTIONS_CEILING, soft // 4))


class HttpLimits(BaseModel):
    """The connection limits `serve` runs uvicorn with; `http_protocol.py`'s docstring says
    what each one promises."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    header_timeout: float = Field(DEFAULT_HEADER_TIMEOUT_SEC, gt=0)
    keep_alive_timeout: float = Field(DEFAULT_KEEP_ALIVE_TIMEOUT_SEC, gt=0)
    max_connections: int = Field(default_factory=default_max_connections, gt=0)
