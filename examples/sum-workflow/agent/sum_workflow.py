"""An example workflow: reads the numbers, writes their sum. From the repository root:

    trialbox run examples/sum-workflow \
        --agent workflow:examples/sum-workflow/agent/sum_workflow.py:SumWorkflow
"""

from pathlib import Path

from container_runtime import AgentContext, AgentWorkflow


class SumWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentContext) -> dict:
        numbers = [int(line) for line in Path("/app/numbers.txt").read_text().split() if line]
        total = sum(numbers)
        Path("/app/answer.txt").write_text(f"{total}\n")
        ctx.messages.append({"role": "user", "content": ctx.instruction})
        ctx.messages.append({"role": "assistant", "content": f"The sum is {total}."})
        return {"sum": total, "count": len(numbers)}
