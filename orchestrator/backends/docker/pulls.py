"""Prebuilt images (Harbor's `docker_image`) pulled once, and what a failed pull means.

A registry that refused (the image is not there, or not ours to have) makes the task unusable
(`validation`); a network or engine failure says nothing about the task (`infra`). The
engine's words decide, the network's winning: a DNS lookup that found no host is not a
refusal.
"""

from __future__ import annotations

import docker.errors

from orchestrator.backends.docker import api as docker_api
from orchestrator.common.errors import ImageBuildError, TaskError, TrialboxError
from orchestrator.tasks.task import Task

PULL_TIMEOUT_SEC = 300.0  # one pull of a prebuilt docker_image; it is tried once
PULL_FAILURE_MEMORY_SEC = 300.0  # a failed pull is not tried again (by any task) sooner

# How the engine words a pull the registry refused because the image is not there or not ours
# to have; the network words win (a DNS lookup that found no host is the network's fault).
_NETWORK_WORDS = (
    "dial tcp", "lookup ", "timeout", "timed out", "connection", "tls", "eof", "no answer",
    "network", "toomanyrequests", "unavailable", "still running",
)  # fmt: skip
_REFUSAL_WORDS = (
    "not found", "manifest unknown", "pull access denied", "does not exist",
    "invalid reference format", "unauthorized", "denied",
)  # fmt: skip


class _PullFailed(Exception):
    """A prebuilt image could not be pulled; `reason` in the engine's words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    @property
    def refused(self) -> bool:
        """The registry answered that the image cannot be had (not the network's fault)."""
        words = self.reason.lower()
        if any(w in words for w in _NETWORK_WORDS):
            return False
        return any(w in words for w in _REFUSAL_WORDS)

    def error(self, task: Task, named: str, ref: str) -> TrialboxError:
        """The error of a task that has no Dockerfile to fall back to: validation when the
        registry refused (the task names an image nobody can have), infra otherwise."""
        message = (
            f"[environment] docker_image {named} in {task.path / 'task.toml'}: the image is not "
            f"local and could not be pulled ({self.reason}). Build or load it on this host "
            f"(docker build -t {ref} ... / docker load), map it to a local image with "
            f"--base-image {ref}=LOCAL (TrialConfig.base_image_map), or add "
            "environment/Dockerfile to the task"
        )
        if self.refused:
            return TaskError(message)
        return ImageBuildError(message, f"pull {ref}: {self.reason}")


def _pull_blocking(ref: str) -> str:
    """Pull `ref`; its image id. `_PullFailed` when the engine says it could not."""
    api = docker_api.docker_client().api
    try:
        for chunk in api.pull(ref, stream=True, decode=True):
            if "error" in chunk:
                raise _PullFailed(str(chunk["error"]).strip())
        return api.inspect_image(ref)["Id"]
    except docker.errors.APIError as exc:
        raise _PullFailed(str(exc.explanation or exc).strip()) from exc


def _tag_blocking(image_id: str, tag: str) -> None:
    repository, _, name = tag.rpartition(":")
    docker_api.docker_client().api.tag(image_id, repository, name)
