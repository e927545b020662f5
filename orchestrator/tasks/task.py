"""Harbor-format task folders: the models of `task.toml` and the loader that checks a folder.

A broken task must fail before any container starts, with an error that names the file and
the field, so every check here runs on the host and touches nothing outside the folder.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.common.errors import TaskError
from orchestrator.tasks.tree import check_tree, kind_of, link_target

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


MAX_TEXT_BYTES = 16 * 1024 * 1024  # task.toml, instruction.md: text, never this large


def regular_file(root: Path, relative: str) -> Path | None:
    """The task's file `relative` (inside `root`) if it is a regular file, or a symlink inside
    the task to one; None if absent. Anything else raises TaskError naming it. Only lstat is
    used, on the fully resolved path, so nothing is opened and nothing outside is followed: a
    FIFO or a device can never block the loader."""
    path = root / relative
    if not os.path.lexists(path):
        return None
    target = link_target(path, root)  # also refuses a parent folder linked outside the task
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        raise TaskError(f"{path}: is a symlink to nothing ({target}), not a regular file") from None
    except NotADirectoryError:
        return None  # a parent is a file: the same as absent
    if not stat.S_ISREG(mode):
        kind = kind_of(mode)
        if path.is_symlink():
            kind = f"symlink to a {kind}"
        raise TaskError(f"{path}: is a {kind}, not a regular file")
    return target


def read_text_file(path: Path, shown: Path) -> str:
    """The UTF-8 text of the regular file `path` (checked by `regular_file`), refusing it if it
    was swapped for something else since: opened without blocking or following a link, and
    checked again on the open descriptor. Errors name `shown`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TaskError(f"{shown}: cannot be read ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TaskError(f"{shown}: is a {kind_of(info.st_mode)}, not a regular file")
        data = handle.read(MAX_TEXT_BYTES + 1)
    if max(info.st_size, len(data)) > MAX_TEXT_BYTES:
        raise TaskError(
            f"{shown}: larger than the {MAX_TEXT_BYTES} bytes a task's text file may be"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(f"{shown}: not UTF-8 text ({exc})") from exc


def load_task_config(path: Path) -> TaskConfig:
    """Parse a task.toml (checked to be a regular file of its folder); a missing file means
    all defaults."""
    found = regular_file(path.parent.resolve(), path.name)
    if found is None:
        return TaskConfig()
    try:
        data = tomllib.loads(read_text_file(found, path))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        raise TaskError(f"{path}: {_describe(exc)}") from exc


def load_task(path: str | Path) -> Task:
    """Load and check a task folder; raise TaskError naming the file and field at fault.

    Every check is on the host, before any container: the named files must be regular files,
    and the whole folder is walked (`check_tree`) for escaping symlinks and special files, so
    a task that materializing or building would refuse is refused here already.
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a task folder (it does not exist or is not a directory)")
    config = load_task_config(root / "task.toml")
    instruction_file = regular_file(root, "instruction.md")
    if instruction_file is None:
        raise TaskError(
            f"{root / 'instruction.md'}: missing; a task needs an instruction for the agent"
        )
    if regular_file(root, "tests/test.sh") is None:
        raise TaskError(
            f"{root / 'tests' / 'test.sh'}: missing; the verifier entrypoint is required"
        )
    dockerfile = root / "environment" / "Dockerfile"
    if (
        regular_file(root, "environment/Dockerfile") is None
        and config.environment.docker_image is None
    ):
        raise TaskError(
            f"{dockerfile}: missing; add one, or set [environment] docker_image in "
            f"{root / 'task.toml'}"
        )
    check_tree(root)
    if (root / "environment").is_dir():
        check_tree(root / "environment")  # the image's build context: links stay inside it
    return Task(
        name=root.name,
        path=root,
        config=config,
        instruction=read_text_file(instruction_file, root / "instruction.md"),
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
    """A folder with an instruction.md or a task.toml, whatever they are: `load_task` then
    says what is wrong with one that is not a regular file (never opened here)."""
    return os.path.lexists(path / "instruction.md") or os.path.lexists(path / "task.toml")


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
