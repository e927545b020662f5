"""The shell agent's settings, resolved once from the container input and the environment."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, Dict, Optional

from container_runtime.contract import ContainerInput
from container_runtime.shell_agent.tool import system_prompt

BASE_URL_ENV = "OPENAI_BASE_URL"
API_KEY_ENV = "OPENAI_API_KEY"
MODEL_ENV = "TRIALBOX_MODEL"
COMMAND_TIMEOUT_ENV = "TRIALBOX_SHELL_TIMEOUT_SEC"

DEFAULT_MAX_TURNS = 30
DEFAULT_COMMAND_TIMEOUT_SEC = 60.0
# The agent stops this long before agent_timeout_sec: 10 % of it, at most 10 s.
DEADLINE_MARGIN_SEC = 10.0
DEADLINE_MARGIN_FRACTION = 0.1


class Settings:
    """Everything the loop needs, resolved once from the input and the environment."""

    def __init__(
        self,
        *,
        url: str,
        api_key: Optional[str],
        model: Optional[str],
        instruction: str,
        sampling: Dict[str, Any],
        max_turns: int,
        command_timeout_sec: float,
        deadline: Optional[float],
        workdir: str,
        shell: str,
        command_env: Dict[str, str],
    ) -> None:
        self.url = url
        self.api_key = api_key
        self.model = model
        self.instruction = instruction
        self.sampling = sampling
        self.max_turns = max_turns
        self.command_timeout_sec = command_timeout_sec
        self.deadline = deadline
        self.workdir = workdir
        self.shell = shell
        self.command_env = command_env

    @classmethod
    def resolve(
        cls, spec: ContainerInput, started: float, environ: Optional[Dict[str, str]] = None
    ) -> Settings:
        env = dict(os.environ if environ is None else environ)
        base = env.get(BASE_URL_ENV, "").strip()
        if base:
            url = base.rstrip("/") + "/chat/completions"
        elif spec.chat_completions_url:
            url = spec.chat_completions_url
        else:
            raise ValueError(
                f"no model endpoint: set {BASE_URL_ENV} or the input's chat_completions_url"
            )
        key_vars = [API_KEY_ENV] + ([spec.credentials_ref] if spec.credentials_ref else [])
        api_key = next((env[name] for name in key_vars if env.get(name)), None)
        deadline = None
        if spec.agent_timeout_sec is not None:
            margin = min(DEADLINE_MARGIN_SEC, DEADLINE_MARGIN_FRACTION * spec.agent_timeout_sec)
            deadline = started + spec.agent_timeout_sec - margin
        return cls(
            url=url,
            api_key=api_key,
            model=env.get(MODEL_ENV, "").strip() or spec.model,
            instruction=spec.instruction,
            sampling=dict(spec.sampling),
            max_turns=spec.max_turns or DEFAULT_MAX_TURNS,
            command_timeout_sec=_command_timeout(env.get(COMMAND_TIMEOUT_ENV)),
            deadline=deadline,
            workdir=os.getcwd(),
            shell=shutil.which("bash") or shutil.which("sh") or "/bin/sh",
            command_env={k: v for k, v in env.items() if k not in key_vars},
        )

    def time_left(self) -> Optional[float]:
        """Seconds until the deadline, or None when there is none."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def system_prompt(self) -> str:
        return system_prompt(self.workdir, self.command_timeout_sec)


def _command_timeout(raw: Optional[str]) -> float:
    if raw is None or not raw.strip():
        return DEFAULT_COMMAND_TIMEOUT_SEC
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{COMMAND_TIMEOUT_ENV}={raw!r}: expected a positive number of seconds")
    return value
