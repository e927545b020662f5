"""A backend without an engine: sandboxes in memory, commands answered by a tiny shell or a
test's script. Used by the tests (trial phases in milliseconds, faults on demand) and to try
trialbox on a machine without Docker (`TrialConfig(backend={"type": "fake"})`).

| module | one idea |
| --- | --- |
| `config` | how a trial config chooses this backend |
| `backend` | `FakeBackend`: images as tags, sandboxes, leftovers, the scripting hooks |
| `sandbox` | `FakeSandbox`: the `Sandbox` protocol over the pieces below |
| `dispatch`, `framework` | what an exec runs; recognising the relay's and verifier's commands |
| `files`, `archives` | the in-memory filesystem (modes, owners); tar in, capped copies out |
| `lexer`, `words`, `shell`, `state` | the tiny `sh`: lists, words, running, a process's state |
| `commands`, `fileutils` | its vocabulary |
| `processes` | execs as processes: pids, signals, in-sandbox timeouts |
| `scripting` | handlers and faults a test gives the backend |
| `images`, `users` | content-hash tags and a Dockerfile's WORKDIR/USER; a tiny passwd |

tests/conformance runs the same scenarios on this backend and on Docker. Where the fake
knowingly differs from a container:

- Commands: only the vocabulary (`shell.py`); no pipes, `&`, `if`/`for`, globs, positional
  parameters or field splitting; an interpreter other than sh/bash is "not found" (127).
  A test that needs more scripts the agent or verifier with a handler.
- Output: stdout and stderr are merged in the order written; Docker's two pipes come back in
  either order.
- Timeouts: a command past `timeout_sec` ends at once with 124; one that ran `trap '' TERM`
  ends `exec_kill_after_sec` later with 137, as `timeout -k`'s KILL ends it in a container.
- Processes: no background children, so a process group is its leader alone; the relay's
  leader probe is answered from the process table, not /proc.
- Images: nothing is built or installed; only the final stage's WORKDIR and USER are kept
  (not inherited through `FROM <stage>` or from the base image); tags are not Docker's.
- Users: `root` and `nobody` (configurable), or any numeric uid[:gid]; no supplementary
  groups, sticky bit or umask (new files 0644, new folders 0755).
- Limits: cpus, memory and pids are not enforced; only the network modes it is given exist
  (by default "none").
- Leftovers: a `FakeBackend` lists and reaps only the sandboxes it made itself; Docker's
  labels are engine-wide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.common.lazy import lazy_exports

if TYPE_CHECKING:
    from orchestrator.backends.fake.backend import FakeBackend
    from orchestrator.backends.fake.sandbox import FakeSandbox
    from orchestrator.backends.fake.scripting import ExecCall, Faults, Handler

# Imported on first use (PEP 562), so `config` (what `BackendConfig` imports) stays light.
_LAZY = {
    "ExecCall": "orchestrator.backends.fake.scripting",
    "FakeBackend": "orchestrator.backends.fake.backend",
    "FakeSandbox": "orchestrator.backends.fake.sandbox",
    "Faults": "orchestrator.backends.fake.scripting",
    "Handler": "orchestrator.backends.fake.scripting",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = ["ExecCall", "FakeBackend", "FakeSandbox", "Faults", "Handler"]
