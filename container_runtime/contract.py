"""The JSON files the orchestrator and the container exchange, as pydantic models.

One definition serves both sides: the host writes ``ContainerInput`` and reads
``ContainerResult``; the runner inside the container does the opposite. Files are written
atomically so a reader never sees half a file, even if the writer is killed mid-write.

`check_reward` holds one reward value to the contract: a finite number a float holds, never a
bool.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Literal, Mapping, Optional, Type, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field

from container_runtime import paths

ModelT = TypeVar("ModelT", bound=BaseModel)
PathArg = Union[str, "os.PathLike[str]"]


class ContainerInput(BaseModel):
    """What the agent gets to know about its trial.

    The ground-truth label is never part of it: the agent runs before ``/tests`` (which may
    hold the label) is uploaded, and this file must not leak it either.
    """

    model_config = ConfigDict(extra="forbid")

    trial_id: str = Field(description="Id of the trial this container belongs to.")
    rollout_id: Optional[str] = Field(
        default=None,
        description="The caller's rollout id when the trial came through the engine, so an "
        "agent can attribute its work (e.g. tag its model calls) to the rollout.",
    )
    instruction: str = Field(description="The task's prompt, given to the agent as is.")
    metadata: Dict[str, Any] = Field(
        default_factory=dict,
        description="Task metadata the agent may use (never the label).",
    )
    chat_completions_url: Optional[str] = Field(
        default=None,
        description="OpenAI-compatible chat-completions endpoint the agent should call.",
    )
    credentials_ref: Optional[str] = Field(
        default=None,
        description=(
            "Name of the environment variable that holds the credential in the agent's "
            "environment; the value itself is never written to a file."
        ),
    )
    model: Optional[str] = Field(
        default=None, description="The model name to send in chat-completions requests."
    )
    sampling: Dict[str, Any] = Field(
        default_factory=dict,
        description="Sampling settings to send with each request (temperature, top_p, "
        "max_tokens, ...).",
    )
    max_turns: Optional[int] = Field(
        default=None, ge=1, description="How many model calls a built-in agent may make."
    )
    agent_timeout_sec: Optional[float] = Field(
        default=None,
        gt=0,
        description="The agent's framework timeout: an agent that knows it can stop in time.",
    )


class ContainerResult(BaseModel):
    """What the runner reports back; written always, even when the workflow failed."""

    status: Literal["success", "failure"] = Field(
        description="Whether the workflow returned normally."
    )
    error: Optional[str] = Field(default=None, description="The error message on failure.")
    error_type: Optional[str] = Field(
        default=None, description="Class name of the exception that ended the run."
    )
    output: Any = Field(
        default=None,
        description="The workflow's JSON-serialisable return value (its repr if it was not).",
    )
    duration_sec: float = Field(ge=0, description="Wall time of the runner, in seconds.")


class InvalidRewardError(ValueError):
    """A reward that the orchestrator would reject: not a finite number, or no name."""


def write_json(path: PathArg, data: Any) -> Path:
    """Write ``data`` as UTF-8 JSON atomically (temp file in the same dir, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    _write_text_atomic(target, text)
    return target


def write_model(path: PathArg, model: BaseModel) -> Path:
    """Write a model as indented UTF-8 JSON atomically; parent dirs are created."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _write_text_atomic(target, model.model_dump_json(indent=2) + "\n")
    return target


def read_model(path: PathArg, model_cls: Type[ModelT]) -> ModelT:
    """Read and validate a model from a JSON file."""
    return model_cls.model_validate_json(Path(path).read_text(encoding="utf-8"))


def _shown(value: Any) -> str:
    """``value`` for an error message, in full (a cut could leave part of a secret the
    orchestrator's scrubber then cannot recognise), except an int too long for a float: its
    digits are counted, as its repr can be thousands of characters or fail outright."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1024:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    return repr(value)


def check_reward(name: Any, value: Any) -> float:
    """Return ``value`` as a float, or raise if the orchestrator could not use it.

    ``bool`` is refused although it is an ``int``: ``True`` as a reward is almost always a
    grader bug (a comparison stored instead of a score). A number ``float()`` cannot hold (an
    int of hundreds of digits overflows) is refused like an infinite one.
    """
    if not isinstance(name, str) or not name:
        raise InvalidRewardError(f"reward names must be non-empty strings, got {_shown(name)}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidRewardError(
            f"reward {name!r} must be a number, got {type(value).__name__} {_shown(value)}"
        )
    try:
        number = float(value)
    except (OverflowError, ValueError, TypeError) as exc:
        raise InvalidRewardError(
            f"reward {name!r} must be a finite number a float can hold, got {_shown(value)} ({exc})"
        ) from exc
    if not math.isfinite(number):
        raise InvalidRewardError(f"reward {name!r} must be finite, got {_shown(value)}")
    return number


def write_reward(
    rewards: Union[float, int, Mapping[str, float]], path: Optional[PathArg] = None
) -> Dict[str, float]:
    """Validate rewards and write them as a flat JSON map (``reward.json`` by default).

    A bare number becomes ``{"reward": x}``, which is how the host reads ``reward.txt`` too.
    Everything is checked before anything is written, so a bad map leaves no file behind.
    """
    if isinstance(rewards, Mapping):
        items = list(rewards.items())
        if not items:
            raise InvalidRewardError("the reward map is empty; set at least one reward")
    else:
        items = [("reward", rewards)]
    checked = {name: check_reward(name, value) for name, value in items}
    write_json(paths.reward_json_path() if path is None else path, checked)
    return checked


def _write_text_atomic(target: Path, text: str) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        # mkstemp creates 0600; the agent and the verifier may run as different users.
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
