"""A backend without an engine: sandboxes in memory, trialbox's own commands answered by kind,
the task's text run by a few words of sh or a test's handler. Used by the tests (trial phases
in milliseconds) and to try trialbox on a machine without Docker
(`TrialConfig(backend={"type": "fake"})`). Failing engine calls on demand are the wrapper in
`backends/faults.py`, which works over this backend and Docker alike.

tests/conformance runs the same scenarios on this backend and on Docker. Where the fake
knowingly differs from a container:

- Commands: the framework's are answered from their meaning (`sandbox.commands`,
  `relay.commands`); a task's text runs through `script.py`'s few words of sh, no more.
  A test that needs more scripts the agent or verifier with a handler.
- Output: stdout and stderr are merged in the order written.
- Timeouts: a command past `timeout_sec` ends at once with 124; one that ran `trap '' TERM`
  ends `exec_kill_after_sec` later with 137, as `timeout -k`'s KILL ends it in a container.
- Processes: no background children, so a process group is its leader alone.
- Files: modes and owners are kept but not enforced; no symlinks.
- Images: nothing is built; only the final stage's WORKDIR and USER are kept.
- Users: `root` and `nobody` (configurable), or any numeric uid[:gid].
- Limits: cpus, memory and pids are not enforced; the engine's account of them is what a
  test scripts (`FakeBackend(health=...)`, `sandbox.engine_health`).
- Leftovers: a `FakeBackend` lists and reaps only the sandboxes it made itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.common.lazy import lazy_exports

if TYPE_CHECKING:
    from orchestrator.backends.fake.backend import FakeBackend
    from orchestrator.backends.fake.sandbox import FakeSandbox
    from orchestrator.backends.fake.script import ExecCall, Handler

# Imported on first use (PEP 562), so `config` (what `BackendConfig` imports) stays light.
_LAZY = {
    "ExecCall": "orchestrator.backends.fake.script",
    "FakeBackend": "orchestrator.backends.fake.backend",
    "FakeSandbox": "orchestrator.backends.fake.sandbox",
    "Handler": "orchestrator.backends.fake.script",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = ["ExecCall", "FakeBackend", "FakeSandbox", "Handler"]
