"""A run that ends amid a model outage says nothing about the policy: when the agent's last
model call failed for the model service's reason (unreachable, too slow, a 5xx, 429 or 401,
a stream cut off), the trial is `infra` (discarded, unscored), whatever the verifier said. A
call that failed for the agent's reason (a 400), an outage the agent survived, or the
gateway's own limits keep the sample counted."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import ModelConfig, TrialConfig, run_trial
from orchestrator.gateway.record import Exchange, GatewayRecord
from tests.conftest import EXAMPLES
from tests.support.standin import Reply, StandIn, shell_solver

SHELL_TASK = EXAMPLES / "hello-shell"
SOLVE = ["echo 'hello, world' > /app/greeting.txt", "cat /app/greeting.txt"]


def exchange(index: int, status: int, error: str | None = None, **fields: object) -> Exchange:
    return Exchange(
        index=index, method="POST", path="/v1/chat/completions", started_at=datetime.now(UTC),
        latency_sec=0.1, status_code=status, error=error, **fields,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "error", "failed"),
    [
        (502, "the upstream model failed: ClientConnectorError: refused", True),
        (504, "the upstream model did not answer in time", True),
        (503, "upstream answered 503", True),
        (429, "upstream answered 429", True),
        (401, "upstream answered 401", True),
        (200, "the stream broke off: ClientPayloadError: cut", True),
        (400, "upstream answered 400", False),  # the agent's request: it counts
        (404, "upstream answered 404", False),
        (400, "bad request body: not JSON", False),
        (200, None, False),
    ],
)
def test_which_failures_are_the_model_services(status: int, error: str, failed: bool) -> None:
    assert exchange(0, status, error).upstream_failed is failed


def test_the_gateways_own_limits_are_never_an_outage() -> None:
    refused = exchange(0, 403, "the trial's calls limit (3) is reached", limit="calls")
    assert not refused.upstream_failed


def test_only_a_run_that_ended_in_an_outage_is_one() -> None:
    down = "the upstream model failed: ClientConnectorError: refused"
    record = GatewayRecord(trial_id="t", exchanges=[exchange(0, 200), exchange(1, 502, down)])
    outage = record.outage()
    assert outage is not None and down in outage and "1 of 2 calls failed upstream" in outage
    survived = GatewayRecord(trial_id="t", exchanges=[exchange(0, 502, down), exchange(1, 200)])
    assert survived.outage() is None
    assert GatewayRecord(trial_id="t").outage() is None


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.docker
async def test_an_unreachable_model_is_infra_not_a_scored_zero(config: TrialConfig) -> None:
    model = ModelConfig(name="policy", base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k")
    result = await run_trial(SHELL_TASK, "shell", config=config.model_copy(update={"model": model}))

    assert result.status == "failure" and result.reward is None
    assert result.error is not None
    assert (result.error.category, result.error.type) == ("infra", "ModelUnavailableError")
    assert result.error.discardable and result.error.phase == "agent"
    assert "the model service failed the agent's last call" in result.error.message
    written = json.loads((Path(result.trial_dir) / "result.json").read_text())
    assert written["error"]["discardable"] is True


@pytest.mark.docker
async def test_an_outage_the_agent_survived_still_counts(config: TrialConfig) -> None:
    solver = shell_solver(SOLVE, "done")

    def overloaded_once(body: dict, index: int) -> Reply:
        return Reply(status=503, error_message="overloaded") if index == 0 else solver(body, index)

    async with StandIn(overloaded_once) as upstream:
        model = ModelConfig(name="policy", base_url=upstream.base_url, api_key="k")
        result = await run_trial(
            SHELL_TASK, "shell", config=config.model_copy(update={"model": model})
        )
    record = json.loads((Path(result.trial_dir) / "logs/agent/gateway.json").read_text())
    assert record["exchanges"][0]["status_code"] == 503
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
