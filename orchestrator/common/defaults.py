"""The defaults `trialbox --help` shows, which the library uses too: plain values importing
only the standard library, so the CLI builds its parsers without loading pydantic or any of
the library (`trialbox --help` stays fast). The module each belongs to imports it from here
under the same name; change a value here, never a copy.

Here: the model key's and the base-image map's variables, prewarm's parallel builds, the
server's body, metadata, retention and connection bounds and its header and keep-alive timeouts,
and the report's log cap, host and port.
"""

from __future__ import annotations

import resource

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""The host variable holding a model upstream's key (`ModelConfig.api_key_env`)."""
BASE_IMAGE_MAP_ENV = "TRIALBOX_BASE_IMAGE_MAP"
"""FROM=LOCAL base-image mappings from the host, 'a=b,c=d' (`TrialConfig.base_image_map`)."""

# Measured with benchmarks/image_build.py on 2 cores (Docker's classic builder, fuse-overlayfs):
# prewarming 8 images took 1.30x the plain builds one after another with 2 at once, 1.15x
# with 3, 1.12x with 4. The engine's per-step overhead, not the cores, bounds it.
DEFAULT_PARALLEL_BUILDS = 4
"""Image builds `prewarm` runs at once."""

MAX_BODY_BYTES = 1 << 20
"""A request body larger than this is answered 413 (`--max-body-bytes`)."""
MAX_METADATA_BYTES = 256 << 10
"""A rollout whose metadata is larger than this as JSON is answered 413 (`--max-metadata-bytes`)."""
DEFAULT_RETENTION_SEC = 15 * 60
"""How long a settled rollout's status stays queryable (`TrialEngine(retention_sec=)`,
`--retention-sec`)."""

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


DEFAULT_LOG_CAP = 24_000
"""How much of each log file the report reads, its head and tail (`trialbox view --log-cap`)."""
DEFAULT_REPORT_HOST = "127.0.0.1"
DEFAULT_REPORT_PORT = 8765
"""Where `trialbox view` serves the report: this machine only (logs can hold what a task
should not show the network)."""
