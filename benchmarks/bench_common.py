"""What both benchmarks share: the trivial task they run and how they read percentiles."""

from __future__ import annotations

from pathlib import Path

DEFAULT_MAP = "python:3.11-slim-bookworm=trialbox-base/python3:bookworm"


def make_task(root: Path, *, network: bool = True) -> Path:
    """A task whose agent has nothing to do and whose verifier writes 1; with a network (the
    default, as in Harbor) or with none."""
    task = root / "bench-nop"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Do nothing.\n")
    none = "" if network else "[environment]\nallow_internet = false\n"
    (task / "task.toml").write_text(
        f"{none}[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n"
    )
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim-bookworm\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return task


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile, q in [0, 1]."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
