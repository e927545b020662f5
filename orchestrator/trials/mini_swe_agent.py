"""`--agent mini-swe-agent`: the `mini-swe-agent` package from PyPI (`trialbox[mini-swe-agent]`),
its loop on the host, its actions in the trial's sandbox.

A host-side agent (`host_agent.py`): mini-swe-agent's own `DefaultAgent` runs in a thread of the
trial's process with two adapters of ours in place of its local pieces:

- `SandboxEnvironment` (its `Environment` interface): each action is one command in the
  sandbox (`HostRun.exec_blocking`: the command channel, else an exec), in the task's working
  directory, with the action timeout of its config (`environment.timeout`, 30 s by default)
  and never past the agent's deadline; a command past it reads as mini-swe-agent's own local
  environment reports one (return code -1 and an `exception_info`); the completion signal is
  its own (`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` first in a successful command's output).
  Its template variables are the sandbox's `uname`, never the host's environment.
- `GatewayModel` (its `Model` interface): chat completions from the trial's gateway slot on
  the host's loopback port (`HostRun.model`), with the slot's token: no litellm, no upstream
  key, no network beyond 127.0.0.1. Actions are parsed as its configuration says: bash code
  blocks (`action_regex`, the default config's format) or, with `model.action_format:
  toolcall`, its `bash` tool.

The configuration is mini-swe-agent's builtin `default.yaml`, with `--agent-config FILE.yaml`
(the spec's `?config=FILE.yaml`) merged over it: step and cost limits, templates, the
environment's `timeout` and `env`, the model's `model_kwargs`. With no `step_limit` the
model's `max_turns` is used. The instruction is the task's (or the rollout's prompt). Its
trajectory is kept as `agent/mini-swe-agent.traj.json` beside the gateway's `trajectory.json`.

The package is imported only when such a trial runs its agent. It must be installed where
the loop runs: on a Ray cluster, on every node (checked there before the loop starts; a node
without it fails the trial as `infra`, `AgentPackageMissingError`, never as the agent's).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.errors import AgentSpecError, TrialboxError
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.sandbox import Sandbox
from orchestrator.trials.host_agent import HostAgent, HostAgentStopped, HostModel, HostRun
from orchestrator.trials.materialize import Materialized
from orchestrator.trials.result import TrialResult

CONFIG_MARK = "?config="
TRAJECTORY_NAME = "mini-swe-agent.traj.json"
PACKAGE = "minisweagent"
TESTED = ">=2.4,<2.5"  # the range pyproject.toml's extra pins, and the tests ran
MODEL_RETRIES = 3
MODEL_TIMEOUT_SEC = 600.0
UNAME = "uname -s; uname -r; uname -v; uname -m"


class AgentPackageMissingError(TrialboxError):
    """The agent's package is not installed where its loop runs (a cluster node set up
    without `trialbox[mini-swe-agent]`): the machine's fault, infra; a retry may land on a
    node that has it."""


def package_here() -> bool:
    """Whether mini-swe-agent can be imported in this process."""
    return importlib.util.find_spec(PACKAGE) is not None


def read_agent_config(path: Path) -> dict[str, Any]:
    """A mini-swe-agent configuration file: a YAML mapping."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise AgentSpecError(f"{path}: the agent config cannot be read as YAML: {exc}") from exc
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise AgentSpecError(f"{path}: the agent config must be a YAML mapping")
    for section in ("agent", "environment", "model"):
        if not isinstance(config.get(section, {}), dict):
            raise AgentSpecError(f"{path}: {section!r} must be a mapping")
    return config


class MiniSweAgent(HostAgent):
    """mini-swe-agent's `DefaultAgent`, its actions in the sandbox, its model the gateway."""

    needs_model = True

    def __init__(self, spec: str, config: dict[str, Any] | None = None) -> None:
        super().__init__(spec)
        self.config = dict(config or {})
        self._agent: Any = None  # mini-swe-agent's, once it ran: its trajectory

    @classmethod
    def from_spec(cls, spec: str) -> MiniSweAgent:
        """`mini-swe-agent` or `mini-swe-agent?config=FILE.yaml`."""
        name, mark, config_file = spec.partition(CONFIG_MARK)
        if name != "mini-swe-agent" or (mark and not config_file):
            raise AgentSpecError(
                f"--agent {spec!r}: expected mini-swe-agent, optionally followed by "
                "?config=<mini-swe-agent config .yaml> (--agent-config FILE.yaml)"
            )
        if not package_here():
            raise AgentSpecError(
                f"--agent {spec!r} needs the mini-swe-agent package ({TESTED}): "
                "pip install 'trialbox[mini-swe-agent]'"
            )
        config = read_agent_config(Path(config_file)) if config_file else {}
        return cls(spec, config)

    async def prepare(self, sandbox: Sandbox, trial: Materialized) -> None:
        """Where the loop runs (a Ray node too), before it starts: the package is there."""
        if not package_here():
            raise AgentPackageMissingError(
                f"--agent {self.spec}: the mini-swe-agent package ({TESTED}) is not installed "
                "where the agent's loop runs (on a cluster: every node needs "
                "'trialbox[mini-swe-agent]')"
            )

    async def run(self, host: HostRun) -> int:
        if host.model is None:
            raise AgentSpecError(f"--agent {self.spec} needs a model")
        return await host.in_thread(self._run, host, host.model)

    def _run(self, host: HostRun, model: HostModel) -> int:
        """Blocking, in the agent's thread: mini-swe-agent's loop, to its end."""
        os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on the trial's stdout
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import builtin_config_dir
        from minisweagent.utils.serialize import recursive_merge

        base = yaml.safe_load((builtin_config_dir / "default.yaml").read_text(encoding="utf-8"))
        config = recursive_merge(base, self.config)
        agent_config = dict(config.get("agent") or {})
        agent_config["output_path"] = None  # kept by `keep`, scrubbed, in the trial's folder
        if not agent_config.get("step_limit") and model.max_turns:
            agent_config["step_limit"] = model.max_turns
        environment = SandboxEnvironment(host, **(config.get("environment") or {}))
        the_model = GatewayModel(host, model, **(config.get("model") or {}))
        agent = self._agent = DefaultAgent(the_model, environment, **agent_config)
        info = agent.run(host.instruction)
        status = info.get("exit_status", "")
        if status == "Submitted":
            return 0
        return 2 if status in ("LimitsExceeded", "TimeExceeded") else 1

    async def keep(self, result: TrialResult, agent_dir: Path, scrubber: Scrubber) -> None:
        """mini-swe-agent's own trajectory, scrubbed, beside the gateway's."""
        if self._agent is None:
            return
        try:
            data = await run_blocking(self._agent.serialize)
            await run_blocking(agent_dir.mkdir, parents=True, exist_ok=True)
            text = scrubber.text(json.dumps(data, indent=2, default=str))
            await write_atomic(agent_dir / TRAJECTORY_NAME, text)
        except Exception as exc:
            result.warnings.append(f"mini-swe-agent's trajectory was not written: {exc!r}")


class SandboxEnvironment:
    """mini-swe-agent's `Environment`: each action a command in the trial's sandbox."""

    def __init__(
        self,
        host: HostRun,
        *,
        cwd: str = "",
        env: dict[str, str] | None = None,
        timeout: float = 30,
        **_ignored: Any,  # environment_class and the like: this is the environment
    ) -> None:
        self.host = host
        self.config: dict[str, Any] = {"cwd": cwd, "env": dict(env or {}), "timeout": timeout}
        self._system: dict[str, str] | None = None

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict:
        from minisweagent.exceptions import Submitted

        command = action.get("command", "")
        limit = float(timeout or self.config["timeout"])
        ran = self.host.exec_blocking(
            command, timeout_sec=limit, cwd=cwd or self.config["cwd"] or None,
            env=self.config["env"],
        )  # fmt: skip
        output: dict[str, Any] = {
            "output": ran.output, "returncode": ran.exit_code, "exception_info": ""
        }  # fmt: skip
        if ran.timed_out:
            output["returncode"] = -1
            output["exception_info"] = (
                "An error occurred while executing the command: Command "
                f"'{command}' timed out after {limit:g} seconds"
            )
            output["extra"] = {"exception_type": "TimeoutExpired", "exception": "timed out"}
        lines = output["output"].lstrip().splitlines(keepends=True)
        done = lines and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        if done and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )
        return output

    def _uname(self) -> dict[str, str]:
        if self._system is None:
            names = ("system", "release", "version", "machine")
            try:
                ran = self.host.exec_blocking(UNAME, timeout_sec=10)
                found = ran.output.splitlines() if ran.exit_code == 0 else []
            except HostAgentStopped:
                raise
            except Exception:
                found = []
            if len(found) != len(names):
                found = ["unknown"] * len(names)
            self._system = dict(zip(names, found, strict=True))
        return self._system

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **self._uname(), **kwargs}

    def serialize(self) -> dict:
        environment_type = f"{type(self).__module__}.{type(self).__name__}"
        return {
            "info": {"config": {"environment": self.config, "environment_type": environment_type}}
        }


class GatewayModel:
    """mini-swe-agent's `Model`: the trial's gateway slot, an OpenAI-compatible endpoint."""

    def __init__(
        self,
        host: HostRun,
        model: HostModel,
        *,
        model_kwargs: dict[str, Any] | None = None,
        action_format: str = "text",
        action_regex: str = r"```mswea_bash_command\s*\n(.*?)\n```",
        format_error_template: str = (
            "Please always provide EXACTLY ONE action in triple backticks, found "
            "{{actions|length}} actions."
        ),
        observation_template: str = (
            "{% if output.exception_info %}<exception>{{output.exception_info}}</exception>\n"
            "{% endif %}<returncode>{{output.returncode}}</returncode>\n<output>\n"
            "{{output.output}}</output>"
        ),
        multimodal_regex: str = "",
        **_ignored: Any,  # model_name, model_class, litellm's settings: the gateway decides
    ) -> None:
        if action_format not in ("text", "toolcall"):
            raise AgentSpecError(f"model.action_format {action_format!r}: text or toolcall")
        self.host, self.model = host, model
        kwargs = dict(model_kwargs or {})
        kwargs.pop("drop_params", None)  # litellm's
        self.config: dict[str, Any] = {
            "model_name": model.name, "model_kwargs": kwargs, "action_format": action_format,
            "action_regex": action_regex, "format_error_template": format_error_template,
            "observation_template": observation_template, "multimodal_regex": multimodal_regex,
        }  # fmt: skip

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        url = f"{self.model.base_url}/chat/completions"
        headers = {"Authorization": f"Bearer {self.model.api_key}"}
        failure = "no answer"
        for attempt in range(MODEL_RETRIES + 1):
            self.host.check()
            try:
                timeout = min(MODEL_TIMEOUT_SEC, max(1.0, self.host.remaining_sec))
                with httpx.Client(timeout=timeout, trust_env=False) as client:
                    answer = client.post(url, json=body, headers=headers)
            except httpx.HTTPError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code == 200:
                    data: dict[str, Any] = answer.json()
                    return data
                failure = f"{answer.status_code}: {answer.text[:500]}"
                if answer.status_code < 500 and answer.status_code != 429:
                    break  # the request's own fault, or the gateway's limit: no retry helps
            if attempt < MODEL_RETRIES:
                time.sleep(min(2.0**attempt, max(0.0, self.host.remaining_sec)))
        self.host.check()
        raise RuntimeError(f"the model call failed: {failure}")

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict:
        from minisweagent.exceptions import FormatError

        prepared = [{k: v for k, v in m.items() if k != "extra"} for m in messages]
        body: dict[str, Any] = {"messages": prepared, **self.config["model_kwargs"], **kwargs}
        if self.config["action_format"] == "toolcall":
            from minisweagent.models.utils.actions_toolcall import BASH_TOOL

            body["tools"] = [BASH_TOOL]
        response = self._post(body)
        choice = (response.get("choices") or [{}])[0]
        message = dict(choice.get("message") or {})
        try:
            actions = self._parse_actions(message, choice.get("finish_reason"))
        except FormatError as exc:
            exc.messages[0]["extra"].update({"cost": 0.0, "response": response})
            raise
        message.setdefault("role", "assistant")
        message["extra"] = {
            "actions": actions, "response": response, "cost": 0.0, "timestamp": time.time()
        }  # fmt: skip
        return message

    def _parse_actions(self, message: dict[str, Any], finish_reason: Any) -> list[dict]:
        template_kwargs = {"finish_reason": finish_reason}
        if self.config["action_format"] == "toolcall":
            from types import SimpleNamespace

            from minisweagent.models.utils.actions_toolcall import parse_toolcall_actions

            calls = [
                SimpleNamespace(
                    id=call.get("id"),
                    function=SimpleNamespace(**(call.get("function") or {})),
                )
                for call in message.get("tool_calls") or []
            ]
            return parse_toolcall_actions(
                calls, format_error_template=self.config["format_error_template"],
                template_kwargs=template_kwargs,
            )  # fmt: skip
        from minisweagent.models.utils.actions_text import parse_regex_actions

        return parse_regex_actions(
            message.get("content") or "", action_regex=self.config["action_regex"],
            format_error_template=self.config["format_error_template"],
            template_kwargs=template_kwargs,
        )  # fmt: skip

    def format_message(self, **kwargs: Any) -> dict:
        from minisweagent.models.utils.openai_multimodal import expand_multimodal_content

        expanded: dict = expand_multimodal_content(kwargs, pattern=self.config["multimodal_regex"])
        return expanded

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        template = self.config["observation_template"]
        pattern = self.config["multimodal_regex"]
        if self.config["action_format"] == "toolcall":
            from minisweagent.models.utils.actions_toolcall import (
                format_toolcall_observation_messages,
            )

            return format_toolcall_observation_messages(
                actions=message.get("extra", {}).get("actions", []), outputs=outputs,
                observation_template=template, template_vars=template_vars,
                multimodal_regex=pattern,
            )  # fmt: skip
        from minisweagent.models.utils.actions_text import format_observation_messages

        return format_observation_messages(
            outputs, observation_template=template, template_vars=template_vars,
            multimodal_regex=pattern,
        )  # fmt: skip

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **kwargs}

    def serialize(self) -> dict:
        model_type = f"{type(self).__module__}.{type(self).__name__}"
        return {"info": {"config": {"model": self.config, "model_type": model_type}}}
