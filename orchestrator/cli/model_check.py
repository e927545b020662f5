"""The model a job names, checked before any trial or job folder: an agent that needs a model
gets one, and the model's URL answers.

Without this, `--agent shell` with no `--model` fails every trial as `validation` one by one,
and a `--model-url` nothing listens on is found only after each trial's gateway has retried
for seconds. One bounded `GET <url>/models` (the OpenAI-compatible model list vLLM, SGLang and
hosted APIs serve) tells at once whether anything answers there.

`check_model` refuses an agent that needs a model without one, naming the flags and job-file
keys; `probe_model_url` is the GET (5 s, no retry, no proxy; any answer below 500 passes), its
refusal naming the URL and `--no-model-check`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.gateway.settings import ModelConfig
    from orchestrator.trials.agents import Agent

MODEL_CHECK_TIMEOUT_SEC = 5.0
SKIP_HINT = "or skip this check with --no-model-check (job file: no_model_check = true)"


def check_model(agent: Agent, model: ModelConfig | None, *, probe: bool = True) -> None:
    """Raise ValueError saying what to give when `agent` needs a model and has none, or
    (when `probe`) when the model's URL does not answer."""
    if model is None:
        if agent.needs_model:
            raise ValueError(
                f"--agent {agent.spec} needs a model: give --model NAME and --model-url URL "
                "(job file keys model and model_url; e.g. the stand-in model, "
                "python3 scripts/standin-model.py --script FILE)"
            )
        return
    if probe:
        probe_model_url(model.base_url)


def probe_model_url(base_url: str, timeout_sec: float = MODEL_CHECK_TIMEOUT_SEC) -> None:
    """One GET of `<base_url>/models`; any answer below 500 means a server is there (401, 403
    and 404 too: a key or a route is a trial's business). No retry, no proxy (the gateway
    reaches the upstream directly too)."""
    import httpx  # here: `trialbox run --help` loads no HTTP client

    url = f"{base_url.rstrip('/')}/models"
    try:
        with httpx.Client(timeout=timeout_sec, trust_env=False) as client:
            status = client.get(url).status_code
    except httpx.TimeoutException:
        why = f"no answer within {timeout_sec:g} s"
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        why = f"{type(exc).__name__}: {exc}"
    else:
        if status < 500:
            return
        why = f"it answered {status}"
    raise ValueError(
        f"--model-url {base_url}: the model does not answer (GET {url}: {why}); start the "
        f"model server, or correct --model-url (job file: model_url), {SKIP_HINT}"
    )
