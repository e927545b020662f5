"""Scores the workflow's answer against the trial's label (`metadata={"label": ...}`)."""

from container_runtime import Grader, GraderContext


def _normal(text: object) -> str:
    return str(text).strip().strip(".").casefold()


class ExactAnswerGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        if ctx.label is None:
            raise ValueError("no label: run the trial with metadata {'label': <the answer>}")
        output = ctx.result.output if ctx.result is not None else None
        answer = output.get("answer", "") if isinstance(output, dict) else ""
        ctx.set_reward(1.0 if _normal(answer) == _normal(ctx.label) else 0.0)
