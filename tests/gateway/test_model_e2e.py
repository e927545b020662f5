"""LLM agents end to end, in real containers with no network, through the model gateway.

The upstream is the scripted OpenAI-compatible stand-in on 127.0.0.1: the same code paths a
user runs against vLLM, SGLang or a hosted API (gateway, forwarder, agent, trajectory).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from container_runtime import messages_from_trajectory
from container_runtime.atif import validate_trajectory
from orchestrator import (
    ModelConfig,
    ModelLimits,
    ModelOverride,
    RolloutRequest,
    Sampling,
    TrialConfig,
    TrialEngine,
    TrialResult,
    run_job,
    run_trial,
)
from orchestrator.sandbox import sandbox_name
from orchestrator.service.server import create_app
from orchestrator.trials.model_link import ModelLink
from tests.conftest import BASE_IMAGE, EXAMPLES, OFFICIAL_IMAGE, REPO_ROOT, remove_trial_container
from tests.support.standin import Reply, StandIn, StandInThread, shell_solver

pytestmark = pytest.mark.docker

SHELL_TASK = EXAMPLES / "hello-shell"
UPSTREAM_KEY = "sk-upstream-e2e-7f3a9c1d5b"
SOLVE = ["echo 'hello, world' > /app/greeting.txt", "cat /app/greeting.txt"]


def with_model(config: TrialConfig, upstream: StandIn, **fields: Any) -> TrialConfig:
    model = ModelConfig(
        name="policy-under-test", base_url=upstream.base_url, api_key=UPSTREAM_KEY, **fields
    )
    return config.model_copy(update={"model": model})


def agent_file(result: TrialResult, name: str) -> Path:
    return Path(result.trial_dir) / "logs" / "agent" / name


async def test_the_shell_agent_solves_a_task_with_no_network_through_the_gateway(
    config: TrialConfig,
) -> None:
    offline = config.model_copy(update={"no_internet": True})
    async with StandIn(shell_solver(SOLVE, "done")) as upstream:
        result = await run_trial(
            SHELL_TASK, "shell", config=with_model(offline, upstream, request_token_ids=True)
        )
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert result.usage is not None and result.usage.calls == 3
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    requests = upstream.chat_requests()
    assert len(requests) == 3
    for request in requests:  # the host's key and the rollout's tag, on every call
        assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert request.headers["x-trialbox-rollout"] == result.trial_id
        assert request.body["user"] == result.trial_id
        assert request.body["model"] == "policy-under-test"
    doc = json.loads(agent_file(result, "trajectory.json").read_text())
    trajectory = validate_trajectory(doc)
    agent_steps = [s for s in trajectory.steps if s.source == "agent"]
    assert len(agent_steps) == 3
    first = agent_steps[0]
    assert first.tool_calls and first.tool_calls[0].arguments == {"command": SOLVE[0]}
    assert first.metrics is not None and first.metrics.completion_token_ids
    assert first.metrics.prompt_token_ids and first.metrics.logprobs
    messages = messages_from_trajectory(doc)
    assert [m["role"] for m in messages].count("tool") == 2
    record = json.loads(agent_file(result, "gateway.json").read_text())
    assert [e["status_code"] for e in record["exchanges"]] == [200, 200, 200]
    # The shell agent sends each answer back as it came: one token sequence to train on.
    assert record["token_drift"]["kind"] == "none"
    assert result.token_drift is not None and result.token_drift.kind == "none"
    assert (result.token_drift.calls, result.token_drift.diverged_calls) == (3, 0)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The probe prints hashes, never a value: what is collected from /logs is scrubbed of the key
# and the token, so only a hash tells which of them was there. It never names the key either.
KEY_PROBE = (
    "command:set -u; "
    'printf %s "$OPENAI_API_KEY" | sha256sum | cut -d" " -f1 > /logs/agent/key-sha256.txt; '
    # every value in every process's environment
    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | while IFS= read -r line; do "
    'printf %s "${line#*=}" | sha256sum | cut -d" " -f1; done > /logs/agent/env-sha256.txt; '
    # every string in any file that looks like an upstream key of this test
    "grep -rhoaE 'sk-upstream-e2e-[0-9a-f]+' / --exclude-dir=proc --exclude-dir=sys "
    "2>/dev/null | sort -u | while IFS= read -r found; do "
    'printf %s "$found" | sha256sum | cut -d" " -f1; done > /logs/agent/files-sha256.txt; '
    "sleep 1"  # the engine lists an exec only while it runs: time to be seen
)


async def watch_execs(client: docker.DockerClient, name: str, seen: dict[str, Any]) -> None:
    """The engine's record of every exec in container `name` while it runs (it forgets an
    exec once it ended), read from outside (nothing run inside); until cancelled."""
    while True:
        try:
            attrs = (await asyncio.to_thread(client.api.inspect_container, name)) or {}
            for exec_id in attrs.get("ExecIDs") or []:
                if exec_id not in seen:
                    seen[exec_id] = await asyncio.to_thread(client.api.exec_inspect, exec_id)
        except docker.errors.APIError:
            pass  # not created yet, or an exec gone between the two calls
        await asyncio.sleep(0.05)


async def test_the_sandbox_never_sees_the_upstream_key(
    config: TrialConfig, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside, the agent's OPENAI_API_KEY is the slot's token (by its hash), and no process's
    environment nor any file holds the key; outside, the engine's records of the container
    and of every exec in it hold neither the key nor the token."""
    tokens: list[str] = []
    agent_env = ModelLink.agent_env

    def recorded(link: ModelLink) -> dict[str, str]:
        env = agent_env(link)
        tokens.append(env["OPENAI_API_KEY"])
        return env

    monkeypatch.setattr(ModelLink, "agent_env", recorded)
    kept = config.model_copy(update={"keep_containers": True})
    trial_id, job_id = f"key-probe-{uuid.uuid4().hex[:8]}", f"job-key-probe-{uuid.uuid4().hex[:8]}"
    name = sandbox_name(trial_id, job_id)
    seen: dict[str, Any] = {}
    watcher = asyncio.ensure_future(watch_execs(docker_client, name, seen))
    try:
        async with StandIn() as upstream:
            result = await run_trial(
                SHELL_TASK, KEY_PROBE, config=with_model(kept, upstream), trial_id=trial_id,
                job_id=job_id,
            )  # fmt: skip
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    try:
        inspected = docker_client.containers.get(name).attrs
    finally:
        remove_trial_container(docker_client.containers.get(name))
    assert result.error is None, result.error
    (token,) = tokens
    assert token != UPSTREAM_KEY and token.startswith("tb-")
    key_hash, token_hash = sha256(UPSTREAM_KEY), sha256(token)
    # inside: the agent holds the token, and nothing holds the key
    assert agent_file(result, "key-sha256.txt").read_text().split() == [token_hash]
    env_hashes = set(agent_file(result, "env-sha256.txt").read_text().split())
    assert token_hash in env_hashes and key_hash not in env_hashes
    assert key_hash not in agent_file(result, "files-sha256.txt").read_text().split()
    # outside: the engine's own records of the sandbox
    env = inspected["Config"]["Env"] or []
    assert not [e for e in env if UPSTREAM_KEY in e or token in e], env
    assert UPSTREAM_KEY not in json.dumps(inspected) and token not in json.dumps(inspected)
    commands = [json.dumps(e["ProcessConfig"]) for e in seen.values()]
    assert any("key-sha256.txt" in c for c in commands), commands  # the agent's own exec
    assert not [c for c in commands if UPSTREAM_KEY in c or token in c]
    everything = "".join(
        p.read_text(errors="replace") for p in Path(result.trial_dir).rglob("*.json")
    )
    assert UPSTREAM_KEY not in everything and token not in everything


async def test_an_upstream_error_reaches_the_agent_and_the_trial_ends_cleanly(
    config: TrialConfig,
) -> None:
    async with StandIn(Reply(status=400, error_message="context too long")) as upstream:
        result = await run_trial(SHELL_TASK, "shell", config=with_model(config, upstream))
    assert (result.status, result.reward, result.error) == ("success", 0.0, None)  # scored
    assert result.agent.termination == "exited" and result.agent.exit_code == 1
    assert "HTTP 400" in agent_file(result, "stderr.txt").read_text()
    record = json.loads(agent_file(result, "gateway.json").read_text())
    assert [e["status_code"] for e in record["exchanges"]] == [400]


async def test_an_upstream_that_does_not_answer_in_time_is_a_504_to_the_agent(
    config: TrialConfig,
) -> None:
    async with StandIn(Reply(hang=True)) as upstream:
        quick = with_model(config, upstream, upstream_timeout_sec=1.0)
        agent = (
            'command:/opt/trialbox/venv/bin/python -c "import os, urllib.request, urllib.error\n'
            "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
            "data=b'{\\\"messages\\\": []}', headers={'Authorization': 'Bearer ' + "
            "os.environ['OPENAI_API_KEY'], 'Content-Type': 'application/json'})\n"
            "try: urllib.request.urlopen(req)\n"
            "except urllib.error.HTTPError as e: print('status', e.code)\""
        )
        result = await run_trial(SHELL_TASK, agent, config=quick)
    assert agent_file(result, "stdout.txt").read_text().strip() == "status 504"
    # The run ended amid the model's outage: discarded, not a scored 0 (test_model_outage.py).
    assert (result.status, result.reward) == ("failure", None)
    assert result.error is not None and result.error.type == "ModelUnavailableError"
    assert result.agent.termination == "exited"
    record = json.loads(agent_file(result, "gateway.json").read_text())
    assert record["exchanges"][0]["status_code"] == 504


@pytest.mark.parametrize(
    ("limits", "reached"),
    [(ModelLimits(max_calls=1), "calls"), (ModelLimits(max_total_tokens=5), "tokens")],
)
async def test_a_model_limit_stops_the_agent_and_the_result_names_it(
    config: TrialConfig, limits: ModelLimits, reached: str
) -> None:
    async with StandIn(shell_solver(["true", *SOLVE], "done")) as upstream:
        result = await run_trial(
            SHELL_TASK, "shell", config=with_model(config, upstream, limits=limits)
        )
    assert result.model_limit == reached
    assert result.usage is not None and result.usage.calls == 1
    assert result.agent.exit_code == 1  # the 403 ended the shell agent
    assert "HTTP 403" in agent_file(result, "stderr.txt").read_text()
    assert result.reward == 0.0  # greeting never written: verified, scored, counted


async def test_a_cancelled_trial_closes_its_gateway_slot(config: TrialConfig) -> None:
    async with StandIn(Reply(hang=True)) as upstream:
        engine = TrialEngine(config=with_model(config, upstream), task=SHELL_TASK, agent="shell")
        async with engine:
            await engine.submit(RolloutRequest(rollout_id="gw-cancel"))
            await upstream.wait_for_requests(1, wait_sec=60)
            gateway = engine.gateway
            assert gateway is not None
            (slot,) = gateway.open_slots  # its socket is in the sandbox's own folder
            assert slot.socket_path.is_socket()
            assert await engine.cancel(ids=["gw-cancel"]) == {"gw-cancel": "cancelled_running"}
            assert engine.status("gw-cancel").status == "cancelled"
            assert gateway.open_slots == []
            assert not slot.folder.exists()  # socket and folder gone with the sandbox
        assert not gateway.root.exists()


async def test_concurrent_trials_never_mix_their_records(config: TrialConfig) -> None:
    async with StandIn(shell_solver(SOLVE, "done")) as upstream:
        job = await run_job(
            [SHELL_TASK, SHELL_TASK, SHELL_TASK], "shell", n_concurrent=3,
            config=with_model(config, upstream),
        )  # fmt: skip
    assert [t.status for t in job.trials] == ["success"] * 3
    for trial in job.trials:
        record = json.loads(agent_file(trial, "gateway.json").read_text())
        assert record["rollout_id"] == trial.rollout_id
        users = {e["request"]["user"] for e in record["exchanges"]}
        assert users == {trial.rollout_id}
        assert len(record["exchanges"]) == 3


async def test_the_server_returns_a_rollouts_usage_and_trajectory(config: TrialConfig) -> None:
    async with StandIn(shell_solver(SOLVE, "done")) as upstream:
        engine = TrialEngine(config=with_model(config, upstream), task=SHELL_TASK, agent="shell")
        app = create_app(engine)
        transport = httpx.ASGITransport(app=app)
        async with engine, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            posted = await client.post("/rollouts", json={"rollout_id": "gw:http-1"})
            assert posted.status_code == 202, posted.text
            early = await client.get("/rollouts/gw:http-1/trajectory")
            assert early.status_code == 409
            status = await _until_final(client, "gw:http-1")
            assert status["status"] == "success" and status["reward"] == 1.0
            assert status["usage"]["calls"] == 3 and status["model_limit"] is None
            got = await client.get("/rollouts/gw:http-1/trajectory")
            assert got.status_code == 200
            trajectory = validate_trajectory(got.json())
            assert trajectory.session_id == status["trial_dir"].rsplit("/", 1)[-1]


async def _until_final(client: httpx.AsyncClient, rollout_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        doc = (await client.get(f"/rollouts/{rollout_id}")).json()
        if doc["finished_at"] is not None:
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"{rollout_id} did not finish")


def test_trialbox_run_scores_a_task_with_the_shell_agent_and_a_model_url(tmp_path: Path) -> None:
    """The issue's done-criterion, as a user types it: `trialbox run TASK --agent shell
    --model M --model-url URL`, the key from the host's OPENAI_API_KEY."""
    with StandInThread(shell_solver(SOLVE, "done")) as upstream:
        done = subprocess.run(
            [
                sys.executable, "-m", "orchestrator.cli", "run", str(SHELL_TASK),
                "--agent", "shell", "--model", "policy-cli", "--model-url", upstream.base_url,
                "--max-turns", "5", "--temperature", "0.5", "--json",
                "--jobs-dir", str(tmp_path / "jobs"),
                "--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}",
            ],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL, env={**os.environ, "OPENAI_API_KEY": UPSTREAM_KEY},
        )  # fmt: skip
        requests = upstream.chat_requests()
    assert done.returncode == 0, done.stderr[-2000:]
    job = json.loads(done.stdout)
    (trial,) = job["trials"]
    assert (trial["status"], trial["reward"], trial["usage"]["calls"]) == ("success", 1.0, 3)
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {UPSTREAM_KEY}"}
    assert {r.body["temperature"] for r in requests} == {0.5}
    assert UPSTREAM_KEY not in done.stdout + done.stderr


async def test_a_rollout_brings_its_own_prompt_model_and_sampling(config: TrialConfig) -> None:
    async with StandIn(shell_solver(SOLVE, "done")) as upstream:
        engine = TrialEngine(config=with_model(config, upstream), task=SHELL_TASK, agent="shell")
        async with engine:
            await engine.submit(
                RolloutRequest(
                    rollout_id="gw:own-1",
                    prompt="Write hello, world into /app/greeting.txt, please.",
                    model=ModelOverride(name="policy-step-7", sampling=Sampling(temperature=0.2)),
                )
            )
            result = await engine.wait("gw:own-1")
    assert (result.status, result.reward, result.rollout_id) == ("success", 1.0, "gw:own-1")
    first = upstream.chat_requests()[0].body
    assert (first["model"], first["temperature"]) == ("policy-step-7", 0.2)
    assert first["messages"][1] == {
        "role": "user",
        "content": "Write hello, world into /app/greeting.txt, please.",
    }


async def test_a_task_with_a_network_still_reaches_its_model_through_the_gateway(
    config: TrialConfig, make_task: Any
) -> None:
    """Recording and limits hold whatever the network: the agent's endpoint is the same."""
    task = make_task(
        "networked",
        instruction=(SHELL_TASK / "instruction.md").read_text(),
        test_sh=(SHELL_TASK / "tests" / "test.sh").read_text(),
        task_toml="[environment]\nallow_internet = true\n",
    )
    async with StandIn(shell_solver(SOLVE, "done")) as upstream:
        result = await run_trial(
            task, "shell", config=with_model(config, upstream, limits=ModelLimits(max_calls=9))
        )
    assert (result.status, result.reward) == ("success", 1.0)
    assert result.usage is not None and result.usage.calls == 3
    record = json.loads(agent_file(result, "gateway.json").read_text())
    assert len(record["exchanges"]) == 3


async def test_pooled_sandboxes_serve_model_trials_each_with_its_own_gateway_slot(
    config: TrialConfig,
) -> None:
    """A pooled sandbox is made before its trial: the trial's slot binds its socket into the
    sandbox's own folder once taken, so the second trial's agent reaches its own slot (its
    calls carry its own id) and the pooled sandbox's folder goes with it."""
    from orchestrator.backends.docker.backend import DockerBackend
    from orchestrator.sandbox.pool import PooledBackend

    pool = PooledBackend(DockerBackend(config.limits), size=1)
    results = []
    try:
        async with StandIn(shell_solver(SOLVE, "done")) as upstream:
            for _ in range(2):
                model_config = with_model(config, upstream)
                results.append(
                    await run_trial(
                        SHELL_TASK, "shell", config=model_config, backend=pool, job_id="pooled"
                    )
                )
                await pool.wait_filled()
            tags = [r.headers["x-trialbox-rollout"] for r in upstream.chat_requests()]
    finally:
        await pool.aclose()
    assert [(r.status, r.reward) for r in results] == [("success", 1.0)] * 2
    assert [r.sandbox_from_pool for r in results] == [False, True]
    assert tags == [results[0].trial_id] * 3 + [results[1].trial_id] * 3
