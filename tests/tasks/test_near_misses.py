"""A task.toml key that looks like a misspelling of a known one is tolerated, with a warning
that names the file, the key and the key it probably meant; other unknown keys stay silent."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from orchestrator import Limits, TrialConfig, load_task, run_trial
from orchestrator.backends.fake import FakeBackend
from orchestrator.tasks.near_misses import near_misses
from orchestrator.tasks.schema import TaskConfig


def warnings_of(make_task, toml: str) -> list[str]:
    return load_task(make_task(task_toml=toml)).warnings


def test_the_brief_s_example_names_the_file_the_key_and_the_meant_key(make_task) -> None:
    folder = make_task(task_toml="[agent]\ntimout_sec = 5.0\n")

    task = load_task(folder)

    assert task.warnings == [
        f"[agent] timout_sec in {folder / 'task.toml'} is not a task.toml key; "
        "did you mean timeout_sec?"
    ]
    assert task.config.agent.timeout_sec == 600.0  # tolerated, not applied: hence the warning


NEAR_MISSES = [
    ("[agent]\nusre = 'agent'\n", "[agent] usre", "user"),
    ("[agent]\ntimeout = 30\n", "[agent] timeout", "timeout_sec"),
    ("[verifier]\ntimeout_secs = 30\n", "[verifier] timeout_secs", "timeout_sec"),
    ("[verifier]\nenvs = {A = '1'}\n", "[verifier] envs", "env"),
    ("[solution]\nenvs = {A = '1'}\n", "[solution] envs", "env"),
    ("[environment]\ncpu = 2\n", "[environment] cpu", "cpus"),
    ("[environment]\nmemroy_mb = 4096\n", "[environment] memroy_mb", "memory_mb"),
    ("[environment]\ndocker-image = 'x:1'\n", "[environment] docker-image", "docker_image"),
    ("[environment.healtcheck]\ncommand = 'true'\n", "[environment] healtcheck", "healthcheck"),
    (
        "[environment.healthcheck]\ncommand = 'true'\nretires = 2\n",
        "[environment.healthcheck] retires",
        "retries",
    ),
    ("[task]\nname = 'a/b'\nkeyword = ['x']\n", "[task] keyword", "keywords"),
    (
        "[task]\nname = 'a/b'\n[[task.authors]]\nname = 'A'\nemial = 'a@b.c'\n",
        "[task.authors] emial",
        "email",
    ),
    ("[agnet]\ntimeout_sec = 5.0\n", "agnet", "agent"),
    ("[enviroment]\ncpus = 2\n", "enviroment", "environment"),
    ("sorce = 'somewhere'\n", "sorce", "source"),
    ("versoin = '1.0'\n", "versoin", "version"),  # the older name of schema_version
]


@pytest.mark.parametrize(("toml", "where", "meant"), NEAR_MISSES)
def test_a_near_miss_in_any_section_warns(make_task, toml: str, where: str, meant: str) -> None:
    folder = make_task(task_toml=toml)

    found = load_task(folder).warnings

    assert found == [
        f"{where} in {folder / 'task.toml'} is not a task.toml key; did you mean {meant}?"
    ]


SILENT = [
    "[agent]\nmax_turns = 30\n",  # an unknown key, but no near miss of any
    "[environment]\nrequired_resources = '12vcpu'\nplatform = 'linux/amd64'\n",
    "[environment]\ndocker_image_archive = 'image.tar'\n",  # a known key with a word added
    "tags = ['a']\n",  # close to [task], but a value, not a table
    "[verifier]\nrestart_environment = true\n",  # close to [verifier.environment]: a table
    "[runner]\nattempts = 3\n[ground_truth]\nepsilon = 0.05\n",
    "[metadata]\ntimout_sec = 5\n",  # free-form: nothing is known there
    "[environment.env]\nTIMOUT_SEC = '5'\n[verifier.env]\nevn = '1'\n",  # the task's variables
    "version = '1.0'\n[task]\nname = 'a/b'\n[agent]\ntimeout_sec = 5.0\n",  # all known
]


@pytest.mark.parametrize("toml", SILENT)
def test_other_unknown_keys_stay_silent(make_task, toml: str) -> None:
    assert warnings_of(make_task, toml) == []


def test_a_task_without_task_toml_has_no_warnings(make_task) -> None:
    assert load_task(make_task()).warnings == []


def test_every_near_miss_is_named_in_the_order_written(make_task) -> None:
    toml = "[agent]\ntimout_sec = 5.0\nusre = 'x'\nmax_turns = 3\n[environment]\ncpu = 2\n"

    found = warnings_of(make_task, toml)

    assert [w.split(" in ")[0] for w in found] == [
        "[agent] timout_sec",
        "[agent] usre",
        "[environment] cpu",
    ]


def test_the_warnings_are_logged_when_the_task_loads(make_task, caplog) -> None:
    folder = make_task(task_toml="[verifier]\ntimout_sec = 5.0\n")

    with caplog.at_level(logging.WARNING, logger="orchestrator.tasks.task"):
        task = load_task(folder)

    assert [r.getMessage() for r in caplog.records] == task.warnings
    assert str(folder / "task.toml") in task.warnings[0]


def test_near_misses_reads_a_parsed_config() -> None:
    config = TaskConfig.model_validate({"agent": {"timout_sec": 5.0}, "soruce": "x"})

    assert near_misses(config, Path("/x/task.toml")) == [
        "soruce in /x/task.toml is not a task.toml key; did you mean source?",
        "[agent] timout_sec in /x/task.toml is not a task.toml key; did you mean timeout_sec?",
    ]


async def test_a_trial_s_result_carries_the_task_s_warnings(make_task, tmp_path: Path) -> None:
    task = load_task(make_task(task_toml="[agent]\ntimout_sec = 5.0\n"))
    config = TrialConfig(jobs_dir=tmp_path / "jobs", backend={"type": "fake"})
    quick = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)

    result = await run_trial(task, "nop", config=config, backend=FakeBackend(quick))

    assert result.status == "success"
    assert task.warnings[0] in result.warnings
