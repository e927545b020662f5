"""What a backend knows of a task image that host-side package work needs.

A bundle's dependencies are resolved on the host for the image's own CPython and against what
the runtime venv already holds there. The backend that builds the image learns those facts
(the Docker backend probes the image once); `bundles/` reads them through `ImageFacts`, so it
imports no backend module.

`ImagePython` is an image's CPython (`usable`: `MIN_PYTHON` or newer); `ImageFacts` adds its
machine and the runtime venv's packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from container_runtime import MIN_PYTHON


@dataclass(frozen=True)
class ImagePython:
    """The CPython an image runs: its real path and version."""

    path: str
    version: str  # e.g. 3.11.2

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def usable(self) -> bool:
        """Whether the runtime runs on it (`container_runtime.MIN_PYTHON` or newer)."""
        parts = tuple(int(p) for p in self.version.split(".")[:2])
        return parts >= MIN_PYTHON


class ImageFacts(Protocol):
    """One task image's CPython, its machine, and the runtime venv's packages for them."""

    @property
    def python(self) -> ImagePython: ...

    @property
    def arch(self) -> str:
        """The image's machine as wheel platform tags spell it (x86_64, aarch64)."""
        ...

    def runtime_site(self) -> Path:
        """A host folder holding what the image's runtime venv has in its site-packages
        (container_runtime and its dependencies for this CPython). Blocking: made on the
        first call, then kept."""
        ...
