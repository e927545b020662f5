"""Host-side agents: the agent's loop runs on the host, in the trial's process, and acts
through the trial's sandbox one command at a time, as a session's caller does.

Nothing of trialbox's runs in the sandbox for it: no runtime, no forwarder, no relay, so it
works on an image with no Python at all (`sh` is enough; the command channel's tools make
it faster). It keeps an in-sandbox agent's promises, which the trial (`Trial._run_host_agent`)
and `drive` here hold:

- the task's `[agent] timeout_sec` bounds the loop: past it the loop is cancelled, the running
  command's process group stopped (the channel's TERM/KILL; an exec's own in-sandbox limit,
  which never runs past the deadline), `result.agent.termination` is `timeout` (exit code
  124) and the verifier still runs;
- a host abort (the trial cancelled) ends the loop the same way, destroys the sandbox and
  reads `aborted`;
- the model is the trial's gateway slot on a loopback port of the host (`HostModel`: its
  `base_url` and the slot's token as `api_key`), so usage, token ids and logprobs are
  recorded and `agent/trajectory.json` is written as for `shell`; the upstream key is never
  the agent's;
- a command that finds the sandbox broken ends the loop with the cause in its category (the
  agent's when it exhausted its sandbox, `infra` when the engine lost it); a loop that raised
  for its own reason is an agent that exited 1, verified as usual (and a model outage that
  ended it is `infra`, as for `shell`).

Writing one: subclass `HostAgent`, implement `async run(host) -> int` (0: done) with
`host.exec(...)` for commands and `host.model` for the model; a loop that blocks (a library
that is not async) runs with `host.in_thread(fn, ...)` and calls `host.exec_blocking(...)`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field

from orchestrator.common.errors import TrialboxError
from orchestrator.sandbox import Sandbox
from orchestrator.sandbox.channel import TIMEOUT_EXIT
from orchestrator.sandbox.runner import CommandRunner
from orchestrator.trials.agents import Agent

DEFAULT_COMMAND_SEC = 60.0
THREAD_STOP_SEC = 10.0  # how long a blocking loop gets to notice it was stopped

T = TypeVar("T")


class HostAgentStopped(Exception):
    """The agent's loop was stopped (its timeout, a host abort): no more commands or calls."""


@dataclass(frozen=True)
class HostModel:
    """The trial's model, reached from the host: an OpenAI-compatible `base_url` on
    127.0.0.1 (the trial's gateway slot) and the slot's token as `api_key`."""

    base_url: str
    api_key: str
    name: str
    sampling: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int | None = None


class HostCommandResult(BaseModel):
    """One command's answer: its exit code and its output (stdout then stderr), capped."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_sec: float = 0.0
    channel: bool = Field(False, description="True when it ran through a command channel.")


class HostRun:
    """What a host-side agent acts through: the trial's sandbox (commands as the task's agent
    user, in its workdir, with the agent's env), the instruction, the model, the clock."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        instruction: str,
        timeout_sec: float,
        user: str = "",
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        model: HostModel | None = None,
        output_cap: int = 1 << 20,
        use_channel: bool = True,
        on_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.instruction = instruction
        self.user = user
        self.workdir = workdir
        self.env = dict(env or {})
        self.model = model
        self.output_cap = output_cap
        self.use_channel = use_channel
        self.deadline = time.monotonic() + timeout_sec
        self.commands = 0
        self._on_stop = on_stop
        self._stopped = False
        self._loop = asyncio.get_running_loop()
        self._commands = CommandRunner(sandbox, use_channel=use_channel)
        self._lock = asyncio.Lock()
        self._from_threads: set[concurrent.futures.Future[HostCommandResult]] = set()

    @property
    def remaining_sec(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    @property
    def stopped(self) -> bool:
        return self._stopped

    def check(self) -> None:
        """Raise `HostAgentStopped` once the loop was stopped or its time is up."""
        if self._stopped:
            raise HostAgentStopped("the agent was stopped")
        if self.remaining_sec <= 0:
            raise HostAgentStopped("the agent's time is up")

    async def exec(
        self,
        command: str,
        *,
        timeout_sec: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> HostCommandResult:
        """Run `sh -c command` in the sandbox (as the agent's user, in `cwd` or the task's
        workdir, with the agent's env and `env` over it), never past the agent's deadline.
        A command past its timeout has its process group stopped and reads `timed_out`, 124.
        A sandbox that cannot run it raises `SandboxError`."""
        async with self._lock:  # one command at a time, as a channel runs them
            self.check()
            limit = min(timeout_sec or DEFAULT_COMMAND_SEC, self.remaining_sec)
            merged = {**self.env, **(env or {})}
            where = cwd or self.workdir
            self.commands += 1
            ran = await self._commands.run(
                command, user=self.user, timeout_sec=limit, env=merged, cwd=where,
                output_cap=self.output_cap,
            )  # fmt: skip
            return HostCommandResult(
                exit_code=ran.exit_code,
                output=(ran.stdout + ran.stderr).decode("utf-8", errors="replace"),
                timed_out=ran.timed_out, truncated=ran.truncated,
                duration_sec=ran.duration_sec, channel=ran.channel,
            )  # fmt: skip

    def exec_blocking(self, command: str, **options: Any) -> HostCommandResult:
        """`exec` from a worker thread (a loop run with `in_thread`); `HostAgentStopped` once
        the loop is stopped, the command then stopped with it."""
        self.check()
        future = asyncio.run_coroutine_threadsafe(self.exec(command, **options), self._loop)
        self._from_threads.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise HostAgentStopped("the agent was stopped while its command ran") from None
        finally:
            self._from_threads.discard(future)

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking loop in a thread of its own; cancelled (the timeout, an abort), the
        loop is stopped (`stop`: its command and model call cut) and given a moment to end."""
        result: asyncio.Future[T] = self._loop.create_future()

        def settle(outcome: Callable[[], None]) -> None:
            if not result.done():
                outcome()

        def target() -> None:
            outcome: Callable[[], None]
            try:
                value = fn(*args)
            except BaseException as exc:  # handed to the loop as it is
                outcome = functools.partial(result.set_exception, exc)
            else:
                outcome = functools.partial(result.set_result, value)
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile: nobody waits
                self._loop.call_soon_threadsafe(settle, outcome)

        thread = threading.Thread(target=target, name="trialbox-host-agent", daemon=True)
        thread.start()
        try:
            return await asyncio.shield(result)
        except asyncio.CancelledError:
            await self.stop()
            await asyncio.wait({result}, timeout=THREAD_STOP_SEC)
            if result.done() and not result.cancelled():
                result.exception()  # retrieved: the loop's end is the stop's consequence
            raise

    async def stop(self) -> None:
        """End the loop: no more commands; the running one (and its process group) stopped;
        the channel closed; the model endpoint closed (`on_stop`). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for future in list(self._from_threads):
            future.cancel()
        async with self._lock:  # the running command, cancelled, has stopped its group
            await self._commands.close()
        if self._on_stop is not None:
            await self._on_stop()


class HostAgent(Agent):
    """An agent whose loop runs on the host (`run`), acting through `HostRun`. It needs no
    runtime in the sandbox and has no process there."""

    on_host = True

    def command(self) -> str:
        raise RuntimeError(f"--agent {self.spec}: its loop runs on the host; it has no process")

    @abstractmethod
    async def run(self, host: HostRun) -> int:
        """Work on `host.instruction` until done; the exit code (0: done, else the agent's
        own reason to stop). `HostAgentStopped` and cancels end it from outside."""


@dataclass
class HostEnding:
    """How a host-side agent's loop ended, in `AgentOutcome`'s terms."""

    termination: Literal["exited", "timeout"]
    exit_code: int | None
    detail: str = ""


async def drive(agent: HostAgent, host: HostRun, timeout_sec: float) -> HostEnding:
    """Run `agent`'s loop under its timeout. Past it: cancelled, stopped, `timeout` (124).
    A loop that raised is an agent that exited 1 (what it raised is the detail); an error of
    trialbox's own, which carries its category (a `SandboxError` the sandbox failed under it,
    an `AgentSpecError` the agent could not run with), and a cancel (the host's abort) are
    raised, the loop stopped first."""
    try:
        async with asyncio.timeout(timeout_sec) as clock:
            code = await agent.run(host)
        return HostEnding("exited", code, f"the agent's loop ended ({code})")
    except TimeoutError as exc:
        if clock.expired():
            return HostEnding(
                "timeout", TIMEOUT_EXIT, f"the agent's timeout ({timeout_sec:g} s) ran out"
            )
        if isinstance(exc, TrialboxError):  # an engine's timeout (SandboxTimeoutError)
            raise
        return HostEnding("exited", 1, f"the agent's loop raised {type(exc).__name__}: {exc}")
    except TrialboxError:
        raise
    except HostAgentStopped as exc:  # its own clock, read in a worker thread
        if host.remaining_sec <= 0:
            return HostEnding("timeout", TIMEOUT_EXIT, f"the agent's timeout ran out: {exc}")
        return HostEnding("exited", 1, f"the agent was stopped: {exc}")
    except Exception as exc:
        return HostEnding("exited", 1, f"the agent's loop raised {type(exc).__name__}: {exc}")
    finally:
        await asyncio.shield(host.stop())
