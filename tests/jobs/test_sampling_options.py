"""Sampling settings from the command line, TRIALBOX_* and a job file (issue 18, item 8):
--sampling KEY=VALUE for any known key, --extra-sampling-key for a pass-through one, and
errors that name the key, its place and the key it was probably meant to be."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli.common import model_of
from orchestrator.cli.run import _given
from orchestrator.cli.settings import load_settings
from orchestrator.gateway.sampling import Sampling
from orchestrator.gateway.settings import ModelConfig, ModelOverride

MODEL = ("--model", "policy", "--model-url", "http://127.0.0.1:9/v1")


def run_settings(*argv: str, job: Path | None = None, env: dict[str, str] | None = None) -> object:
    given = _given(build_parser().parse_args(["run", *MODEL, *argv]))
    return load_settings(given, job, env or {})


def test_sampling_flags_give_known_keys_as_json_or_text() -> None:
    settings = run_settings(
        "--sampling", "top_k=20", "--sampling", "stop=</answer>", "--sampling",
        'stop_token_ids=[1, 2]', "--sampling", "ignore_eos=true", "--temperature", "0.7",
    )  # fmt: skip
    model = model_of(settings)
    assert model is not None
    assert model.sampling.as_body() == {
        "temperature": 0.7, "top_k": 20, "stop": "</answer>", "stop_token_ids": [1, 2],
        "ignore_eos": True,
    }  # fmt: skip


def test_serve_takes_the_same_sampling_options() -> None:
    args = build_parser().parse_args(
        ["serve", *MODEL, "--sampling", "min_p=0.05", "--sampling", "guided_regex=a+",
         "--extra-sampling-key", "guided_regex"]
    )  # fmt: skip
    model = model_of(args)
    assert model is not None and model.extra_sampling_keys == ["guided_regex"]
    assert model.sampling.as_body() == {"min_p": 0.05, "guided_regex": "a+"}


def test_an_unknown_key_is_refused_with_its_likely_key_unless_let_through() -> None:
    with pytest.raises(ValueError, match=r"--sampling top_kk: .*did you mean top_k\?"):
        model_of(run_settings("--sampling", "top_kk=20"))
    model = model_of(run_settings("--sampling", "top_kk=20", "--extra-sampling-key", "top_kk"))
    assert model is not None and model.sampling.as_body() == {"top_kk": 20}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--sampling", "temperature=NaN"), "--sampling: temperature: NaN is not a finite"),
        (("--sampling", "guided=1e999"), "--sampling: guided: 1e999 is not a finite"),
        (("--sampling", "top_k=-7"), "--sampling: top_k: Input should be greater than"),
        (("--sampling", "top_k"), "give KEY=VALUE"),
    ],
)
def test_a_bad_sampling_value_names_the_flag_and_the_key(
    argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run_settings(*argv)


def test_a_key_given_by_its_own_flag_and_by_sampling_is_refused() -> None:
    with pytest.raises(ValueError, match="temperature is given by --temperature and by --sampling"):
        model_of(run_settings("--temperature", "0.5", "--sampling", "temperature=0.6"))


def test_a_job_file_and_the_environment_hold_them_too(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text(
        'extra_sampling_key = ["guided_json"]\n'
        '[sampling]\ntop_k = 40\nguided_json = {type = "object"}\n'
    )
    model = model_of(run_settings(job=job))
    assert model is not None and model.extra_sampling_keys == ["guided_json"]
    assert model.sampling.as_body() == {"top_k": 40, "guided_json": {"type": "object"}}

    env = {"TRIALBOX_SAMPLING": '{"min_p": 0.1, "vllm_xargs": {"a": 1}}',
           "TRIALBOX_EXTRA_SAMPLING_KEY": "vllm_xargs"}  # fmt: skip
    model = model_of(run_settings(env=env))
    assert model is not None and model.sampling.as_body() == {"min_p": 0.1, "vllm_xargs": {"a": 1}}


def test_a_job_files_nan_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    """TOML can write nan and inf; no setting takes them."""
    job = tmp_path / "job.toml"
    job.write_text("temperature = nan\n")
    with pytest.raises(ValueError, match=r"job\.toml: temperature: Input should be a finite"):
        run_settings(job=job)
    job.write_text("[sampling]\nguided = inf\n")
    with pytest.raises(ValueError, match=r"job\.toml: sampling: guided: holds NaN or Infinity"):
        run_settings(job=job)


@pytest.mark.parametrize("key", ["stream", "model", "messages", " "])
def test_a_pass_through_key_cannot_be_the_gateways_own(key: str) -> None:
    with pytest.raises(ValueError, match="extra_sampling_keys"):
        ModelConfig(name="m", base_url="http://127.0.0.1:9/v1", extra_sampling_keys=[key])


def test_python_models_hold_the_same_rule() -> None:
    """`Sampling` keeps any key (it cannot know the pass-through list); `ModelConfig` and a
    rollout's override merged into it refuse the ones not let through."""
    with pytest.raises(ValueError, match=r"sampling\.mn_p: .*did you mean min_p\?"):
        ModelConfig(name="m", base_url="http://127.0.0.1:9/v1", sampling=Sampling(mn_p=0.1))
    config = ModelConfig(name="m", base_url="http://127.0.0.1:9/v1", extra_sampling_keys=["x"])
    merged = config.merged(ModelOverride(sampling=Sampling(x=1, top_k=3)))
    assert merged.sampling.as_body() == {"x": 1, "top_k": 3}
    with pytest.raises(ValueError, match=r"model\.sampling\.y: "):
        config.merged(ModelOverride(sampling=Sampling(y=1)))
