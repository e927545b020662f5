"""Harbor-format task folders: the models of `task.toml` and the loader that checks a folder.

A broken task must fail before any container starts, with an error that names the file and
the field, so every check here runs on the host and touches nothing outside the folder.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.common.errors import TaskError

DEFAULT_PIDS_LIMIT = 1024


class _Section(BaseModel):
    # Harbor datasets carry fields we do not use; tolerate them rather than refuse the task.
    model_config = ConfigDict(extra="allow")


class AgentSection(_Section):
    timeout_sec: float = Field(600.0, gt=0, description="Seconds the agent may work.")


class VerifierSection(_Section):
    timeout_sec: float = Field(600.0, gt=0, description="Seconds tests/test.sh may run.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for tests/test.sh."
    )


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(600.0, gt=0, description="Seconds an image build may take.")
    docker_image: str | None = Field(
        None, description="A prebuilt image to use instead of environment/Dockerfile."
    )
    cpus: float = Field(1.0, gt=0, description="CPU limit of the sandbox.")
    memory_mb: int = Field(2048, gt=0, description="Memory limit of the sandbox in MiB.")
    pids_limit: int = Field(DEFAULT_PIDS_LIMIT, gt=0, description="Process limit of the sandbox.")
    allow_internet: bool = Field(
        False, description="Give the sandbox a network; trialbox's default is none."
    )
    network_mode: Literal["none", "bridge", "host"] | None = Field(
        None, description="Docker network mode; wins over allow_internet when set."
    )

    @property
    def effective_network_mode(self) -> str:
        if self.network_mode is not None:
            return self.network_mode
        return "bridge" if self.allow_internet else "none"


class TaskConfig(_Section):
    """The parsed `task.toml`."""

    version: str = "1.0"
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form metadata.")
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)

    @model_validator(mode="before")
    @classmethod
    def _sections_are_tables(cls, data: Any) -> Any:
        for name in ("metadata", "agent", "verifier", "environment"):
            if isinstance(data, dict) and name in data and not isinstance(data[name], dict):
                raise ValueError(f"[{name}] must be a table")
        return data


class Task(BaseModel):
    """A loaded, checked task folder."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="The folder's name.")
    path: Path = Field(description="Absolute path of the task folder.")
    config: TaskConfig
    instruction: str = Field(description="The text of instruction.md.")

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        got = item.get("input")
        shown = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
        parts.append(f"field {where}: {item['msg']}{shown}")
    return "; ".join(parts)


def load_task_config(path: Path) -> TaskConfig:
    """Parse a task.toml; a missing file means all defaults."""
    if not path.exists():
        return TaskConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        raise TaskError(f"{path}: {_describe(exc)}") from exc


def load_task(path: str | Path) -> Task:
    """Load and check a task folder; raise TaskError naming the file and field at fault."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a task folder (it does not exist or is not a directory)")
    config = load_task_config(root / "task.toml")
    instruction_file = root / "instruction.md"
    if not instruction_file.is_file():
        raise TaskError(f"{instruction_file}: missing; a task needs an instruction for the agent")
    test_sh = root / "tests" / "test.sh"
    if not test_sh.is_file():
        raise TaskError(f"{test_sh}: missing; the verifier entrypoint is required")
    dockerfile = root / "environment" / "Dockerfile"
    if config.environment.docker_image is None and not dockerfile.is_file():
        raise TaskError(
            f"{dockerfile}: missing; add one, or set [environment] docker_image in "
            f"{root / 'task.toml'}"
        )
    return Task(
        name=root.name,
        path=root,
        config=config,
        instruction=instruction_file.read_text(encoding="utf-8"),
    )


def resolve_task_id(tasks_dir: str | Path, task_id: str) -> Path:
    """Dataset mode: the folder of `task_id` under `tasks_dir`, refusing any escape."""
    base = Path(tasks_dir).resolve()
    candidate = Path(task_id)
    if not task_id or candidate.is_absolute() or ".." in candidate.parts:
        raise TaskError(f"task id {task_id!r}: must be a relative name inside {base}")
    resolved = (base / candidate).resolve()
    if not resolved.is_relative_to(base):
        raise TaskError(f"task id {task_id!r}: resolves to {resolved}, outside {base}")
    return resolved


def is_task_dir(path: Path) -> bool:
    return (path / "instruction.md").is_file() or (path / "task.toml").is_file()


def discover_tasks(path: str | Path) -> list[Task]:
    """One task folder, or every task folder directly inside `path`, sorted by name."""
    root = Path(path)
    if is_task_dir(root):
        return [load_task(root)]
    if not root.is_dir():
        raise TaskError(f"{root}: no such folder")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and is_task_dir(p))
    if not folders:
        raise TaskError(f"{root}: holds no task folder (none has instruction.md or task.toml)")
    return [load_task(p) for p in folders]
