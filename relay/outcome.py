"""The one decision the relay makes about a subject, which every later step reads.

`RelayOutcome` (its `Ending`, exit code, whether the sandbox was destroyed, `scoreable`) is that
decision; `RelayPolicy` the relay's time budget (graces, abort windows, the destroy deadline).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Ending(StrEnum):
    """How the subject ended."""

    EXITED = "exited"  # ended by itself; nothing was torn down, whatever its exit code
    TIMEOUT = "timeout"  # framework timeout: leader confirmed stopped, sandbox kept, scoreable
    ABORTED = "aborted"  # host abort: group quiesced or sandbox destroyed; trial cancelled
    INFRA_FAILURE = "infra_failure"  # something could not be confirmed: sandbox destroyed


TIMEOUT_EXIT_CODE = 124


@dataclass(frozen=True)
class RelayOutcome:
    """The relay's verdict on one launch."""

    ending: Ending
    exit_code: int | None = None
    sandbox_destroyed: bool = False
    stop_sec: float = 0.0
    detail: str = ""

    @property
    def scoreable(self) -> bool:
        """Whether the sandbox is still there and the trial may be verified."""
        return self.ending in (Ending.EXITED, Ending.TIMEOUT) and not self.sandbox_destroyed


@dataclass(frozen=True)
class RelayPolicy:
    """The relay's time budget, in seconds.

    After a framework timeout the leader gets TERM, then KILL, each wait clipped so that a
    destroy reserve (min(20 s, 20% of the agent timeout)) is always left for failing closed.
    When every pid is taken, stopping every process from the host (and seeing the leader's
    exec return) has its own `host_stop`, outside those graces.
    """

    term_grace: float = 20.0
    kill_grace: float = 10.0
    abort_term_quiet: float = 10.0
    abort_kill_quiet: float = 5.0
    poll_interval: float = 0.1
    signal_timeout: float = 5.0
    destroy_deadline: float = 30.0
    host_stop: float = 15.0

    def destroy_reserve(self, agent_timeout: float) -> float:
        return min(20.0, 0.2 * agent_timeout)

    def stop_budget(self, agent_timeout: float) -> float:
        """The whole window after a timeout: both graces plus the destroy reserve."""
        return self.term_grace + self.kill_grace + self.destroy_reserve(agent_timeout)
