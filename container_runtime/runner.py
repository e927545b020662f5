"""Entrypoints that run a workflow or a grader and honour the file contract.

The agent entrypoint must write ``container_result.json`` whatever happens: the host tells
"the agent failed" from "the sandbox broke" by that file's presence. The grade entrypoint is
the opposite: it writes ``reward.json`` only for a complete, valid set of rewards, so a
broken grader shows up as a missing reward rather than a wrong one.

`agent_main` and `grade_main` are the two entrypoints.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import sys
import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Union

from container_runtime import paths
from container_runtime.contract import (
    ContainerInput,
    ContainerResult,
    read_model,
    write_json,
    write_model,
    write_reward,
)
from container_runtime.trajectory import write_trajectory
from container_runtime.workflow import AgentContext, AgentWorkflow, Grader, GraderContext


class Terminated(BaseException):
    """Raised in the runner when SIGTERM arrives, so the result file is still written.

    A ``BaseException`` like ``KeyboardInterrupt``: a workflow's ``except Exception`` must
    not swallow the relay's request to stop.
    """


# A class to run: ``module:Class`` (imported at run time), or a function returning the class
# (a bundle's entry module binds its classes when it is built, and imports them in one).
ClassRef = Union[str, Callable[[], type]]


def resolve_class(ref: ClassRef, base: type) -> type:
    """The class ``ref`` names, checked to subclass ``base``."""
    if isinstance(ref, str):
        return load_class(ref, base)
    obj = ref()
    if not isinstance(obj, type) or not issubclass(obj, base):
        raise TypeError(f"{obj!r} is not a subclass of {base.__name__}")
    return obj


def read_workflow_config() -> Dict[str, Any]:
    """The workflow's configuration the host staged (a JSON object), else an empty one."""
    path = paths.workflow_config_path()
    if not path.is_file():
        return {}
    config = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the workflow config must be a JSON object")
    return config


def load_class(spec: str, base: type) -> type:
    """Import ``module:Class`` (the working directory first on ``sys.path``) and check it."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"class spec {spec!r} must look like 'module:Class'")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ModuleNotFoundError(
                f"cannot find module {module_name!r} (from spec {spec!r}) on sys.path; "
                f"working directory is {cwd}",
                name=exc.name,
            ) from exc
        raise
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise AttributeError(
                f"module {module_name!r} has no attribute {attr_path!r} (from spec {spec!r})"
            ) from exc
    if not isinstance(obj, type) or not issubclass(obj, base):
        raise TypeError(f"{spec!r} is {obj!r}, not a subclass of {base.__name__}")
    return obj


def agent_main(workflow_spec: ClassRef) -> int:
    """Run a workflow once; always write the result file. Returns the exit code."""
    started = time.monotonic()
    ctx = None
    try:
        with _sigterm_raises():
            cls = resolve_class(workflow_spec, AgentWorkflow)
            ctx = AgentContext(
                read_model(paths.container_input_path(), ContainerInput), read_workflow_config()
            )
            output = asyncio.run(cls().run(ctx))
        result = ContainerResult(
            status="success", output=_jsonable(output), duration_sec=_since(started)
        )
    except BaseException as exc:  # the result file must be written whatever ended the run
        traceback.print_exc()
        result = ContainerResult(
            status="failure",
            error=str(exc) or repr(exc),
            error_type=type(exc).__name__,
            duration_sec=_since(started),
        )
    if ctx is not None and ctx.messages:
        _save_messages(ctx.messages)
    try:
        write_model(paths.container_result_path(), result)
    except Exception:
        traceback.print_exc()
        return 1
    return 0 if result.status == "success" else 1


def grade_main(grader_spec: ClassRef) -> int:
    """Run a grader; write ``reward.json`` only if it set valid rewards. Returns the exit code."""
    try:
        cls = resolve_class(grader_spec, Grader)
        ctx = GraderContext.load()
        asyncio.run(cls().grade(ctx))
        if not ctx.rewards:
            named = grader_spec if isinstance(grader_spec, str) else cls.__name__
            print(
                f"grader {named} set no reward (call ctx.set_reward); "
                f"{paths.reward_json_path()} was not written",
                file=sys.stderr,
            )
            return 1
        write_reward(ctx.rewards)
    except BaseException:  # any failure means "no reward"
        traceback.print_exc()
        return 1
    return 0


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into ``Terminated`` while the workflow runs.

    By default SIGTERM kills Python without unwinding, and the relay's framework timeout
    sends exactly that: the result file would never be written.
    """

    def _raise(signum: int, frame: Any) -> None:
        raise Terminated(f"received signal {signal.Signals(signum).name}")

    try:
        previous = signal.signal(signal.SIGTERM, _raise)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _jsonable(output: Any) -> Any:
    """The output itself if JSON can hold it, else its repr (the run still succeeded)."""
    try:
        json.dumps(output)
    except (TypeError, ValueError):
        return repr(output)
    return output


def _save_messages(messages: List[Any]) -> None:
    """Save the trajectory without ever failing the run for it.

    Messages ATIF cannot express (a tool result that answers no call, an unknown role) are
    kept as a plain messages list, which readers accept too; only an unwritable list is
    dropped, with a note on stderr.
    """
    try:
        write_trajectory(messages)
        return
    except (TypeError, ValueError) as exc:
        print(f"trajectory not written as ATIF ({exc}); writing plain messages", file=sys.stderr)
    try:
        write_json(paths.trajectory_path(), messages)
    except Exception:
        traceback.print_exc()


def _since(started: float) -> float:
    return max(0.0, time.monotonic() - started)
