"""Which process made a sandbox, written on it as labels, so a later trialbox process can tell
a sandbox whose maker is gone (SIGKILLed, crashed) from one a live process is still using.

A process is its host, its pid and its start time: a pid alone may have been reused by an
unrelated process since, and a pid says nothing on another host (or another container's pid
namespace), so only sandboxes made on this host are ever judged.

`Creator` (read with psutil) goes to labels and back; `is_gone` says a process ended or its pid
is another's now (another host's is never gone).
"""

from __future__ import annotations

import functools
import os
import socket

import psutil
from pydantic import BaseModel, ConfigDict

LABEL_HOST = "trialbox.host"
LABEL_PID = "trialbox.pid"
LABEL_PID_STARTED = "trialbox.pid_started"
LABEL_JOBS_DIR = "trialbox.jobs_dir"


class Creator(BaseModel):
    """The process that made a sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    pid: int
    started: str  # the process's start time, as `_started` writes it

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL_HOST: self.host, LABEL_PID: str(self.pid), LABEL_PID_STARTED: self.started}

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Creator | None:
        """The creator a sandbox's labels name; None when they name none (made before these
        labels existed, or edited): such a sandbox is never judged dead."""
        host, pid, started = (labels.get(k) for k in (LABEL_HOST, LABEL_PID, LABEL_PID_STARTED))
        if not host or not started or not pid or not pid.isdigit():
            return None
        return cls(host=host, pid=int(pid), started=started)


def _started(process: psutil.Process) -> str:
    # Seconds since the epoch, to the clock tick the kernel counts in: the same for one
    # process however often it is read.
    return f"{process.create_time():.2f}"


@functools.cache
def _this_process(pid: int) -> Creator:
    return Creator(host=socket.gethostname(), pid=pid, started=_started(psutil.Process(pid)))


OWNER_ENV = "TRIALBOX_OWNER"


def default_owner() -> str:
    """Whose work this process does: TRIALBOX_OWNER, else this host and pid. The default
    `trialbox.owner` of its sandboxes; the images it builds carry it when it was given
    (`backends/docker/build.py`, `build_labels`)."""
    return os.environ.get(OWNER_ENV) or f"{socket.gethostname()}:{os.getpid()}"


def this_process() -> Creator:
    """This process (computed once per pid: a forked child is a process of its own)."""
    return _this_process(os.getpid())


def is_gone(creator: Creator) -> bool:
    """Whether the process `creator` names has ended. Only a process of this host can be
    judged: one of another host is never gone, as far as this process can tell."""
    if creator.host != socket.gethostname():
        return False
    try:
        process = psutil.Process(creator.pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its parent
            return True
        return _started(process) != creator.started  # the pid is another process's now
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:  # it exists (as another user's): alive
        return False
