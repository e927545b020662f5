"""Scores /app/answer.txt against the label (from /tests/label.json when the trial gave one,
else the sum recomputed from the task's own numbers)."""

from pathlib import Path

from container_runtime import Grader, GraderContext


class SumGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        expected = ctx.label
        if expected is None:
            expected = sum(int(n) for n in Path("/app/numbers.txt").read_text().split())
        try:
            answer = int(Path("/app/answer.txt").read_text().strip())
        except (OSError, ValueError):
            answer = None
        ctx.set_reward(1.0 if answer == int(expected) else 0.0)
