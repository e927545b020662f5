"""Answers the task's question with one call to the model endpoint, through `openai`.

The endpoint is the trial's model gateway (a sandbox without a network still reaches it);
`ctx.api_key()` is the gateway's token, worthless anywhere else. `workflow_config` comes
from the host: `--workflow-config FILE` on `trialbox serve`, `?config=FILE` in the agent spec,
or `BundleAgent.load(..., workflow_config={...})` in Python.
"""

from openai import AsyncOpenAI

from container_runtime import AgentContext, AgentWorkflow

SYSTEM_PROMPT = "Answer with the answer only: no sentence, no punctuation."


class AnswerWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentContext) -> dict:
        client = AsyncOpenAI(base_url=ctx.base_url, api_key=ctx.api_key())
        messages = [
            {"role": "system", "content": ctx.workflow_config.get("system_prompt", SYSTEM_PROMPT)},
            {"role": "user", "content": ctx.prompt},
        ]
        reply = await client.chat.completions.create(
            model=ctx.model or "default", messages=messages, extra_body=ctx.sampling
        )
        answer = (reply.choices[0].message.content or "").strip()
        ctx.messages.extend([*messages, {"role": "assistant", "content": answer}])
        return {"answer": answer}
