"""What a bundle's workflow gets, in process: classes bound by the entry module (no lookup by
name), the prompt, the model endpoint as OpenAI clients take it, the key for it, and the
workflow's configuration from the host; a workflow that returns nothing still succeeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from container_runtime import AgentContext, AgentWorkflow, Grader, GraderContext, paths
from container_runtime.contract import ContainerInput, ContainerResult, read_model, write_model
from container_runtime.runner import agent_main, grade_main

SEEN: dict[str, Any] = {}


class Records(AgentWorkflow):
    async def run(self, ctx: AgentContext) -> None:
        SEEN.update(
            prompt=ctx.prompt, base_url=ctx.base_url, model=ctx.model, key=ctx.api_key(),
            sampling=ctx.sampling, config=ctx.workflow_config, ref=ctx.credentials_ref,
        )  # fmt: skip


class Full(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        ctx.set_reward(1.0)


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(paths.LOGS_DIR_ENV, str(tmp_path / "logs"))
    monkeypatch.setenv(paths.TESTS_DIR_ENV, str(tmp_path / "tests"))
    SEEN.clear()
    return tmp_path / "logs"


def stage(**fields: Any) -> None:
    write_model(
        paths.container_input_path(),
        ContainerInput(trial_id="t-1", instruction="What is 2+2?", **fields),
    )


def test_a_gateway_trial_gives_the_endpoint_the_model_the_token_and_the_config(
    logs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage(
        chat_completions_url="http://127.0.0.1:4100/v1/chat/completions", model="policy",
        sampling={"temperature": 0.5}, credentials_ref="MY_KEY",
    )  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", "tb-slot-token")
    monkeypatch.setenv("MY_KEY", "a-credential")
    paths.workflow_config_path().write_text(json.dumps({"system_prompt": "be brief"}))

    assert agent_main(lambda: Records) == 0

    assert SEEN == {
        "prompt": "What is 2+2?", "base_url": "http://127.0.0.1:4100/v1", "model": "policy",
        "key": "tb-slot-token", "sampling": {"temperature": 0.5},
        "config": {"system_prompt": "be brief"}, "ref": "MY_KEY",
    }  # fmt: skip
    outcome = read_model(paths.container_result_path(), ContainerResult)
    assert (outcome.status, outcome.output) == ("success", None)  # returning nothing is fine


def test_without_a_model_the_key_is_the_named_credential_and_the_config_empty(
    logs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage(chat_completions_url="https://models.example/v1/chat/completions", credentials_ref="K")
    monkeypatch.setenv("K", "the-key")
    monkeypatch.setenv("OPENAI_API_KEY", "not-this-one")
    assert agent_main(lambda: Records) == 0
    assert (SEEN["key"], SEEN["base_url"], SEEN["config"]) == (
        "the-key", "https://models.example/v1", {},
    )  # fmt: skip


def test_a_config_that_is_not_an_object_fails_the_run_with_the_file_named(logs: Path) -> None:
    stage()
    paths.workflow_config_path().write_text("[1, 2]")
    assert agent_main(lambda: Records) == 1
    outcome = read_model(paths.container_result_path(), ContainerResult)
    assert outcome.status == "failure"
    assert str(paths.workflow_config_path()) in (outcome.error or "")


def test_a_bound_class_that_is_not_a_workflow_still_writes_the_result(logs: Path) -> None:
    stage()
    assert agent_main(lambda: Full) == 1
    outcome = read_model(paths.container_result_path(), ContainerResult)
    assert outcome.error_type == "TypeError"
    assert "not a subclass of AgentWorkflow" in (outcome.error or "")


def test_an_import_error_of_the_bound_module_is_the_runs_failure(logs: Path) -> None:
    stage()

    def missing() -> type:
        raise ModuleNotFoundError("No module named 'openai'", name="openai")

    assert agent_main(missing) == 1
    outcome = read_model(paths.container_result_path(), ContainerResult)
    assert (outcome.error_type, outcome.error) == (
        "ModuleNotFoundError",
        "No module named 'openai'",
    )


def test_a_bound_grader_writes_its_reward(logs: Path) -> None:
    assert grade_main(lambda: Full) == 0
    assert json.loads(paths.reward_json_path().read_text()) == {"reward": 1.0}
