"""The agent that runs a workflow bundle: `--agent bundle:WHEEL_OR_PROJECT[?config=FILE]`.

A bundle is a wheel of the user's rollout project (`orchestrator.bundles.build_bundle`). Its
dependencies are in the trial's image already (`for_task` asks for them: the Docker backend
adds them to the runtime venv in an image FROM the task's, shared by every bundle with the
same dependencies); each trial uploads only the bundle's own code, installed on the host with
`--no-deps`, and runs its `<package>-agent` script under the relay. When the task has no
tests/, the bundle's grader is its verifier, through a generated tests/test.sh.

`BundleAgent` is the agent; `for_task` is `Agent.for_task` overridden.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from container_runtime import paths
from orchestrator.bundles import BundleError, BundleInfo, build_bundle, inspect_bundle
from orchestrator.bundles.image import BUNDLE_BIN, BundleDependencies
from orchestrator.bundles.install import code_files, generated_test_sh
from orchestrator.bundles.task import BundleTask
from orchestrator.common.archive import tar_of_files
from orchestrator.common.errors import AgentSpecError
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import Sandbox
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent, WorkflowAgent
from orchestrator.trials.materialize import Materialized

CONFIG_MARK = "?config="


def read_workflow_config(path: Path) -> dict[str, Any]:
    """A workflow config file: one JSON object."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: the workflow config cannot be read as JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise BundleError(f"{path}: the workflow config must be a JSON object")
    return config


class BundleAgent(Agent):
    """Runs a bundle's workflow; scores with its grader when the task has no tests/."""

    needs_runtime = True
    problem = WorkflowAgent.problem  # the same runner writes the same container_result.json

    def __init__(
        self, spec: str, info: BundleInfo, *, workflow_config: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(spec)
        self.info = info
        self.workflow_config = dict(workflow_config or {})
        try:
            self._config_json = json.dumps(self.workflow_config, indent=2).encode()
        except (TypeError, ValueError) as exc:
            raise BundleError(f"bundle {info.name}: workflow_config is not JSON: {exc}") from exc
        self._code: dict[str, tuple[bytes, int]] | None = None

    @classmethod
    def load(
        cls,
        source: str | Path,
        *,
        workflow_config: Mapping[str, Any] | None = None,
        config_file: str | Path | None = None,
    ) -> BundleAgent:
        """From a bundle wheel, or a project folder (built with its [tool.trialbox] classes,
        once per content). The workflow's configuration: `workflow_config`, or the JSON object
        in `config_file`, which the agent's spec then names (a resumed job reads it again)."""
        if workflow_config is not None and config_file is not None:
            raise BundleError("give the workflow's config as workflow_config or config_file")
        path = Path(source).resolve()
        wheel = path if path.suffix == ".whl" else build_bundle(path)
        spec = f"bundle:{wheel}"
        if config_file is not None:
            config_path = Path(config_file).resolve()
            workflow_config = read_workflow_config(config_path)
            spec += f"{CONFIG_MARK}{config_path}"
        return cls(spec, inspect_bundle(wheel), workflow_config=workflow_config)

    @classmethod
    def from_spec(cls, spec: str, rest: str) -> BundleAgent:
        """`--agent bundle:WHEEL_OR_PROJECT[?config=FILE.json]`."""
        source, mark, config = rest.partition(CONFIG_MARK)
        if not source or (mark and not config):
            raise AgentSpecError(
                f"--agent {spec!r}: expected bundle:<wheel or project folder>, optionally "
                "followed by ?config=<workflow config .json>"
            )
        return cls.load(source, config_file=config or None)

    def for_task(self, task: Task) -> Task:
        """The task with this bundle's dependencies for its image; without tests/, scored by
        the bundle's grader (refused when the bundle has none)."""
        if not task.has_tests and self.info.grade_script is None:
            raise BundleError(
                f"{task.tests_dir / 'test.sh'}: missing, and bundle {self.info.name} "
                f"({self.info.wheel}) has no grader to score the task instead: build it with "
                "one (--grader, or [tool.trialbox] grader) or give the task a tests/test.sh"
            )
        dependencies = BundleDependencies(
            bundle=f"{self.info.name} ({self.info.wheel})",
            requirements=self.info.requirements,
            requires_python=self.info.requires_python,
        )
        return BundleTask.of(task, dependencies)

    def carry_files(self) -> None:
        """The user's code, installed from the wheel once: a copy of this agent on a Ray
        node uploads it from memory, the wheel's path being the driver's."""
        if self._code is None:
            self._code = code_files(self.info.wheel)

    def _upload(self) -> bytes:
        self.carry_files()
        assert self._code is not None
        files = dict(self._code)
        if self.workflow_config:
            files[paths.WORKFLOW_CONFIG.lstrip("/")] = (self._config_json, 0o644)
        return tar_of_files(files)

    async def prepare(self, sandbox: Sandbox, trial: Materialized) -> None:
        """Upload the bundle's code (and the workflow's config); write the verifier a task
        without tests/ gets into the trial's copy, which reaches /tests after the agent."""
        await sandbox.upload(await run_blocking(self._upload), "/")
        test_sh = trial.tests_dir / "test.sh"
        if self.info.grade_script is not None and not await run_blocking(test_sh.exists):
            await run_blocking(_write_script, test_sh, generated_test_sh(self.info.grade_script))

    def command(self) -> str:
        return f"exec {BUNDLE_BIN}/{self.info.agent_script}"


def _write_script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
