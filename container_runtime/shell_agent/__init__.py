"""The built-in shell agent (``python -m container_runtime shell``): one tool, ``bash``.

A minimal tool-calling loop, the reference agent for RL rollouts. It reads
``/logs/agent/container_input.json``, sends the task's instruction to an OpenAI-compatible
chat-completions endpoint together with one function tool, ``bash(command)``, runs each
command the model asks for from the task's working directory (the agent's own cwd), and
answers with the command's merged output and exit code. It stops when a reply has no tool
call, after ``max_turns`` model calls, when its deadline is near, or on SIGTERM (what the
relay sends at the framework timeout). The conversation is saved as
``/logs/agent/trajectory.json`` however the run ends.

Configuration, environment first:

- endpoint: ``OPENAI_BASE_URL`` (``{base}/chat/completions`` is called), else the input's
  ``chat_completions_url`` as given;
- key: ``OPENAI_API_KEY``, else the variable the input's ``credentials_ref`` names; sent as
  ``Authorization: Bearer ...`` and removed from the commands' environment;
- model: ``TRIALBOX_MODEL``, else the input's ``model``;
- per-command timeout: ``TRIALBOX_SHELL_TIMEOUT_SEC`` (default 60 s);
- ``sampling``, ``max_turns`` (default 30) and ``agent_timeout_sec`` from the input.

Exit codes: 0 the model was done, 1 a model (or setup) error, 2 ``max_turns`` reached,
3 the deadline was reached or SIGTERM arrived.

The package, one idea a module:

- ``settings``: the settings, resolved once from the input and the environment;
- ``tool``: the ``bash`` tool as the model sees it (schema, system prompt, result text);
- ``command``: running one command (timeout, process-group kill, capped output, drain);
- ``client``: the model client (chat-completions over urllib, retries, the deadline);
- ``loop``: the conversation loop and its stopping rules; saving the trajectory;
- ``signals``: SIGTERM and SIGINT while the agent runs;
- ``entry``: ``main``, which maps how the run ended to the exit code;
- ``outcomes`` (exit codes and exceptions) and ``console`` (stdout and stderr lines).

The names below are re-exported for callers; a module reads its own constants, so a test
that changes one (``BACKOFF_BASE_SEC``) patches it in the module that defines it.
"""

from __future__ import annotations

from container_runtime.shell_agent.client import (
    BACKOFF_BASE_SEC,
    MAX_RETRIES,
    REQUEST_TIMEOUT_SEC,
    ChatClient,
)
from container_runtime.shell_agent.command import (
    DRAIN_GRACE_SEC,
    OUTPUT_LIMIT_BYTES,
    CommandResult,
    run_command,
)
from container_runtime.shell_agent.entry import main
from container_runtime.shell_agent.loop import ShellAgent
from container_runtime.shell_agent.outcomes import (
    EXIT_DEADLINE,
    EXIT_DONE,
    EXIT_MAX_TURNS,
    EXIT_MODEL_ERROR,
    DeadlineReached,
    ModelError,
    Terminated,
)
from container_runtime.shell_agent.settings import (
    API_KEY_ENV,
    BASE_URL_ENV,
    COMMAND_TIMEOUT_ENV,
    DEADLINE_MARGIN_FRACTION,
    DEADLINE_MARGIN_SEC,
    DEFAULT_COMMAND_TIMEOUT_SEC,
    DEFAULT_MAX_TURNS,
    MODEL_ENV,
    Settings,
)
from container_runtime.shell_agent.tool import (
    BASH_TOOL,
    SYSTEM_PROMPT,
    TOOL_NAME,
    describe_result,
)

__all__ = [
    "API_KEY_ENV",
    "BACKOFF_BASE_SEC",
    "BASE_URL_ENV",
    "BASH_TOOL",
    "COMMAND_TIMEOUT_ENV",
    "DEADLINE_MARGIN_FRACTION",
    "DEADLINE_MARGIN_SEC",
    "DEFAULT_COMMAND_TIMEOUT_SEC",
    "DEFAULT_MAX_TURNS",
    "DRAIN_GRACE_SEC",
    "EXIT_DEADLINE",
    "EXIT_DONE",
    "EXIT_MAX_TURNS",
    "EXIT_MODEL_ERROR",
    "MAX_RETRIES",
    "MODEL_ENV",
    "OUTPUT_LIMIT_BYTES",
    "REQUEST_TIMEOUT_SEC",
    "SYSTEM_PROMPT",
    "TOOL_NAME",
    "ChatClient",
    "CommandResult",
    "DeadlineReached",
    "ModelError",
    "Settings",
    "ShellAgent",
    "Terminated",
    "describe_result",
    "main",
    "run_command",
]
