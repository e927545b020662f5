"""A backend without an engine: sandboxes in this process, their files in a host folder and
their processes in a mount and pid namespace of their own that every exec joins, as a
container's (`shell.py`): trialbox's commands and the task's text run with the host's real
sh and programs, or a test's handler stands in. Used by the tests and to try trialbox on a
machine without Docker (`TrialConfig(backend={"type": "fake"})`); it needs root and
util-linux (`unshare`, `nsenter`, `setpriv`; a `SandboxError` says so otherwise). Failing
engine calls on demand are the wrapper in `backends/faults.py`, which works over this backend
and Docker alike.

tests/conformance runs the same scenarios on this backend and on Docker. Where the fake
knowingly differs from a container:

- Commands: `CheckRuntime` is answered by the backend (`runtime`); a test that needs a
  scripted agent or verifier gives the backend a handler.
- Programs: the host's /usr, /etc and program folders, read-only, stand in for the image's
  (nothing of a Dockerfile is installed; what the sandbox's folder has there is hidden).
- Output: stdout and stderr are merged in the order written.
- Files: each sandbox's are a host folder of its own (modes and owners kept: a command runs
  as its uid:gid, the fake's own writes are root's), there until the `FakeSandbox` is
  dropped, so a test can read what a finished trial left; a handler's stand-ins live in
  /.trialbox-fake.
- Images: nothing is built; only the final stage's WORKDIR and USER are kept.
- Users: `root` and `nobody`, or any numeric uid[:gid]; the environment is the spec's and
  the exec's alone (no PATH, HOME or HOSTNAME: the shells' default path finds programs).
- Limits: cpus, memory and pids are not enforced; the engine's account of them is what a
  test scripts (`FakeBackend(health=...)`, `sandbox.engine_health`), else the count of the
  namespace's processes.
- Leftovers: a `FakeBackend` lists and reaps only the sandboxes it made itself.
- Isolation: none to speak of. A command runs on the host's kernel and network, as root when
  asked (a chroot holds no root in), and the fake's own file work follows any symlink a
  command made: run trusted tasks only.
"""

from orchestrator.backends.fake.backend import FakeBackend
from orchestrator.backends.fake.sandbox import FakeSandbox
from orchestrator.backends.fake.shell import ExecCall, Handler

__all__ = ["ExecCall", "FakeBackend", "FakeSandbox", "Handler"]
