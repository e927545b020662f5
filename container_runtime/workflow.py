"""The base classes users subclass: an agent workflow and a grader, with their contexts.

A workflow only sees ``AgentContext`` (never the label); a grader sees ``GraderContext``,
built from the files the agent phase left behind plus ``/tests``. The runner does the file
I/O, so user code stays plain async Python.
"""

from __future__ import annotations

import abc
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from container_runtime import paths
from container_runtime.contract import ContainerInput, ContainerResult, check_reward, read_model
from container_runtime.trajectory import load_messages


class AgentContext:
    """What a workflow gets: its input, its own configuration from the host
    (``workflow_config``), and a message list it may append to.

    Messages appended here are saved as the trajectory by the runner when non-empty, even if
    the workflow fails, so a failed run can still be inspected.
    """

    def __init__(
        self, input: ContainerInput, workflow_config: Optional[Dict[str, Any]] = None
    ) -> None:
        self.input = input
        self.messages: List[Dict[str, Any]] = []
        self.workflow_config: Dict[str, Any] = {} if workflow_config is None else workflow_config

    @property
    def trial_id(self) -> str:
        return self.input.trial_id

    @property
    def rollout_id(self) -> Optional[str]:
        return self.input.rollout_id

    @property
    def instruction(self) -> str:
        return self.input.instruction

    @property
    def prompt(self) -> str:
        """The rollout's prompt; the task's instruction.md when the rollout gave none."""
        return self.input.instruction

    @property
    def metadata(self) -> Dict[str, Any]:
        return self.input.metadata

    @property
    def chat_completions_url(self) -> Optional[str]:
        return self.input.chat_completions_url

    @property
    def base_url(self) -> Optional[str]:
        """The model endpoint as OpenAI clients take it (``.../v1``), from
        ``chat_completions_url``: ``AsyncOpenAI(base_url=ctx.base_url, api_key=ctx.api_key())``."""
        url = self.input.chat_completions_url
        if url is None:
            return None
        suffix = "/chat/completions"
        return url[: -len(suffix)] if url.rstrip("/").endswith(suffix) else url

    @property
    def model(self) -> Optional[str]:
        """The model name to send, when the trial has a model."""
        return self.input.model

    @property
    def sampling(self) -> Dict[str, Any]:
        """Sampling settings to send with each request (temperature, top_p, max_tokens)."""
        return self.input.sampling

    @property
    def credentials_ref(self) -> Optional[str]:
        """The name of the environment variable that holds the credential."""
        return self.input.credentials_ref

    @property
    def logs_dir(self) -> Path:
        return paths.logs_dir()

    @property
    def artifacts_dir(self) -> Path:
        """Files put here are copied back to the host as they are."""
        return paths.artifacts_dir()

    def credential(self) -> Optional[str]:
        """The credential's value, read from the environment variable the input names.

        Only the variable's name travels through files; the value stays in the environment.
        """
        if not self.input.credentials_ref:
            return None
        return os.environ.get(self.input.credentials_ref)

    def api_key(self) -> Optional[str]:
        """The key for ``base_url``: the model gateway's token (``OPENAI_API_KEY``, worthless
        anywhere else) when the trial has a model, else the credential the input names."""
        if self.input.model is not None:
            return os.environ.get("OPENAI_API_KEY")
        return self.credential()


class AgentWorkflow(abc.ABC):
    """An agent, run once per trial by ``python -m container_runtime agent``."""

    @abc.abstractmethod
    async def run(self, ctx: AgentContext) -> Any:
        """Do the task; the return value (JSON-serialisable) becomes the result's output.

        Returning nothing is fine: the conversation the model gateway recorded becomes the
        trial's ``trajectory.json``, and the grader's ``ctx.messages`` when the workflow
        appended none."""


class GraderContext:
    """What a grader gets: the agent's input, result, messages, and the label.

    Every piece is optional because the agent may have died before writing anything; the
    grader decides what a missing piece is worth. Rewards set here are written by the runner.
    """

    def __init__(
        self,
        input: Optional[ContainerInput] = None,
        result: Optional[ContainerResult] = None,
        label: Any = None,
        messages: Optional[List[Dict[str, Any]]] = None,
    ) -> None:
        self.input = input
        self.result = result
        self.label = label
        self.messages: List[Dict[str, Any]] = [] if messages is None else messages
        self.rewards: Dict[str, float] = {}

    @classmethod
    def load(cls) -> GraderContext:
        """Build a context from the contract files that exist; absent ones become None."""
        input_path = paths.container_input_path()
        result_path = paths.container_result_path()
        label_path = paths.label_path()
        return cls(
            input=read_model(input_path, ContainerInput) if input_path.is_file() else None,
            result=read_model(result_path, ContainerResult) if result_path.is_file() else None,
            label=(
                json.loads(label_path.read_text(encoding="utf-8")) if label_path.is_file() else None
            ),
            messages=load_messages(paths.trajectory_path()),
        )

    @property
    def tests_dir(self) -> Path:
        return paths.tests_dir()

    def set_reward(self, value: float, name: str = "reward") -> None:
        """Record a reward; refused at once (not at write time) if it is not finite."""
        self.rewards[name] = check_reward(name, value)


class Grader(abc.ABC):
    """Scores a trial, run by ``python -m container_runtime grade`` from ``tests/test.sh``."""

    @abc.abstractmethod
    async def grade(self, ctx: GraderContext) -> None:
        """Inspect the context and call ``ctx.set_reward`` at least once."""
