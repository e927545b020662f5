"""``python -m container_runtime shell``: run the agent once and map how it ended to a code."""

from __future__ import annotations

import time
import traceback
from typing import List, Tuple

from container_runtime import paths
from container_runtime.contract import ContainerInput, read_model
from container_runtime.shell_agent.console import log
from container_runtime.shell_agent.loop import ShellAgent
from container_runtime.shell_agent.outcomes import (
    EXIT_DEADLINE,
    EXIT_MAX_TURNS,
    EXIT_MODEL_ERROR,
    DeadlineReached,
    ModelError,
    Terminated,
)
from container_runtime.shell_agent.settings import Settings
from container_runtime.shell_agent.signals import TerminationSignals


def main() -> int:
    """``python -m container_runtime shell``: run the agent once; returns the exit code."""
    started = time.monotonic()
    holder: List[ShellAgent] = []
    with TerminationSignals() as signals:
        try:
            code, why = _start_and_run(started, holder)
        except Terminated as exc:  # arrived outside the loop's own handling
            if holder:
                holder[0].answer_pending(f"the agent received {exc}")
            code, why = EXIT_DEADLINE, f"received {exc}"
        finally:
            signals.mute()
            if holder:
                try:
                    holder[0].save()
                except Exception:
                    traceback.print_exc()
    log(f"stopped ({why}); exit code {code}")
    return code


def _start_and_run(started: float, holder: List[ShellAgent]) -> Tuple[int, str]:
    try:
        spec = read_model(paths.container_input_path(), ContainerInput)
        holder.append(ShellAgent(Settings.resolve(spec, started)))
    except Exception as exc:
        log(f"cannot start: {type(exc).__name__}: {exc}")
        return EXIT_MODEL_ERROR, "no start"
    return _run_guarded(holder[0])


def _run_guarded(agent: ShellAgent) -> Tuple[int, str]:
    """Run the loop and map how it ended to (exit code, reason); tool calls get answers."""
    try:
        code = agent.run()
    except DeadlineReached as exc:
        agent.answer_pending("the agent's deadline came")
        return EXIT_DEADLINE, f"deadline: {exc}"
    except Terminated as exc:
        agent.answer_pending(f"the agent received {exc}")
        return EXIT_DEADLINE, f"received {exc}"
    except ModelError as exc:
        agent.answer_pending("the model call failed")
        log(f"model error: {exc}")
        return EXIT_MODEL_ERROR, "model error"
    except Exception as exc:
        traceback.print_exc()
        agent.answer_pending("the agent failed")
        return EXIT_MODEL_ERROR, f"{type(exc).__name__}: {exc}"
    if code == EXIT_MAX_TURNS:
        return code, f"max_turns ({agent.settings.max_turns}) reached"
    return code, "the model is done"
