"""SIGTERM and SIGINT during a run: the first stops the agent, later ones are only noted."""

from __future__ import annotations

import signal
from typing import Any, Dict, List

from container_runtime.shell_agent.outcomes import Terminated

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TerminationSignals:
    """Raises ``Terminated`` at the first SIGTERM or SIGINT while installed.

    The exception surfaces wherever the agent is (a model call, a command, whose process
    group ``run_command`` then kills). A later signal, or any after ``mute()``, is only
    noted: it must not break the clean-up of the first. The previous handlers come back on
    exit.
    """

    def __init__(self) -> None:
        self._noted: List[int] = []
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> TerminationSignals:
        self._previous = {
            signum: signal.signal(signum, self._on_signal) for signum in HANDLED_SIGNALS
        }
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def mute(self) -> None:
        """From here on a signal is only noted."""
        self._noted.append(0)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._noted.append(signum)
        if len(self._noted) == 1:
            raise Terminated(signal.Signals(signum).name)
