"""How a run of the shell agent ends: its exit codes and the exceptions that stop the loop."""

from __future__ import annotations

EXIT_DONE = 0
EXIT_MODEL_ERROR = 1
EXIT_MAX_TURNS = 2
EXIT_DEADLINE = 3


class ModelError(Exception):
    """The model endpoint failed for good (a 4xx, or retries used up); ends the run."""


class DeadlineReached(Exception):
    """The agent's time (agent_timeout_sec less the margin) is up."""


class Terminated(BaseException):
    """SIGTERM (or SIGINT) arrived; a ``BaseException`` so no handler swallows it."""
