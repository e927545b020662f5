"""Env templates: Harbor's ${VAR} / ${VAR:-default}, read from the host when a trial starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import TaskError, load_task
from orchestrator.tasks.envvars import EnvTemplate, find_env_templates, resolve_env_templates

SOURCE = Path("/tasks/t/task.toml")
SECRET = "s3cr3t-value-never-shown"


def resolve(values: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    return resolve_env_templates(values, field="verifier.env", source=SOURCE, environ=environ)


def test_a_set_variable_is_substituted() -> None:
    assert resolve({"API_URL": "${HOST_URL}"}, {"HOST_URL": "http://h"}) == {"API_URL": "http://h"}


def test_a_default_is_used_only_when_the_variable_is_unset() -> None:
    values = {"MODE": "${MODE:-fast}", "EMPTY": "${E:-x}", "BLANK": "${B:-}"}
    assert resolve(values, {}) == {"MODE": "fast", "EMPTY": "x", "BLANK": ""}
    # Set wins, even set to "" (Harbor tests membership, unlike the shell's :-).
    assert resolve(values, {"MODE": "slow", "E": "", "B": "b"}) == {
        "MODE": "slow",
        "EMPTY": "",
        "BLANK": "b",
    }


def test_the_default_runs_to_the_last_brace() -> None:
    assert resolve({"A": "${X:-a}b}"}, {}) == {"A": "a}b"}


@pytest.mark.parametrize(
    "value",
    ["plain", "http://${HOST}/x", "${HOST}/x", "$HOST", "${}", "pre${HOST}", "${A:=b}"],
)
def test_only_a_whole_value_template_is_substituted(value: str) -> None:
    # No inline substitution, as in Harbor: these pass through literally, even when set.
    assert resolve({"K": value}, {"HOST": "h", "A": "a"}) == {"K": value}


def test_literal_values_pass_through_untouched() -> None:
    assert resolve({"A": "1", "B": "${B}"}, {"B": "2"}) == {"A": "1", "B": "2"}


def test_an_unset_variable_without_default_names_file_field_and_variable() -> None:
    with pytest.raises(TaskError) as raised:
        resolve({"API_URL": "${HOST_URL}", "OK": SECRET}, {"OTHER": SECRET})
    message = str(raised.value)
    assert str(SOURCE) in message
    assert "verifier.env.API_URL" in message
    assert "HOST_URL" in message
    assert "Set HOST_URL" in message
    assert SECRET not in message
    assert raised.value.category == "validation"


def test_every_unset_variable_is_named_at_once_and_no_value_is_shown() -> None:
    values = {"A": "${VA}", "B": "${VB}", "C": "${VC:-dflt}", "D": "${VD}"}
    with pytest.raises(TaskError) as raised:
        resolve(values, {"VD": SECRET})
    message = str(raised.value)
    assert "verifier.env.A" in message and "verifier.env.B" in message
    assert "verifier.env.C" not in message and "verifier.env.D" not in message
    assert SECRET not in message


def test_resolves_against_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIALBOX_TEST_TEMPLATE", SECRET)
    got = resolve_env_templates({"K": "${TRIALBOX_TEST_TEMPLATE}"}, field="f", source=SOURCE)
    assert got == {"K": SECRET}
    monkeypatch.delenv("TRIALBOX_TEST_TEMPLATE")
    with pytest.raises(TaskError, match=r"f\.K needs .* TRIALBOX_TEST_TEMPLATE"):
        resolve_env_templates({"K": "${TRIALBOX_TEST_TEMPLATE}"}, field="f", source=SOURCE)


def test_find_env_templates() -> None:
    found = find_env_templates({"A": "${X}", "B": "b", "C": "${Y:-d}"}, field="environment.env")
    assert found == [
        EnvTemplate(field="environment.env.A", variable="X", default=None),
        EnvTemplate(field="environment.env.C", variable="Y", default="d"),
    ]


TEMPLATED = (
    '[environment]\nenv = { TOKEN = "${TB_T_TOKEN}", MODE = "${TB_T_MODE:-x}" }\n'
    '[verifier]\nenv = { API_URL = "${TB_T_URL}", LIT = "literal" }\n'
    '[solution]\nenv = { KEY = "${TB_T_KEY}" }\n'
)


def test_templates_are_kept_as_written_at_load(make_task, monkeypatch) -> None:
    monkeypatch.setenv("TB_T_URL", SECRET)
    config = load_task(make_task(task_toml=TEMPLATED)).config  # loads with variables unset
    assert config.verifier.env == {"API_URL": "${TB_T_URL}", "LIT": "literal"}
    assert config.environment.env["TOKEN"] == "${TB_T_TOKEN}"
    assert config.solution.env == {"KEY": "${TB_T_KEY}"}


def test_a_task_lists_the_host_variables_it_needs(make_task) -> None:
    task = load_task(make_task(task_toml=TEMPLATED))
    fields = [t.field for t in task.config.env_templates()]
    assert fields == [
        "environment.env.TOKEN",
        "environment.env.MODE",
        "verifier.env.API_URL",
        "solution.env.KEY",
    ]
    missing = task.missing_env_vars({"TB_T_TOKEN": "t"})
    assert [t.variable for t in missing] == ["TB_T_URL", "TB_T_KEY"]
    assert [t.variable for t in task.missing_env_vars({}, include_solution=False)] == [
        "TB_T_TOKEN",
        "TB_T_URL",
    ]
    assert task.missing_env_vars({"TB_T_TOKEN": "", "TB_T_URL": "", "TB_T_KEY": ""}) == []


def test_check_env_vars_names_the_task_toml(make_task) -> None:
    task = load_task(make_task(task_toml=TEMPLATED))
    with pytest.raises(TaskError) as raised:
        task.check_env_vars({"TB_T_TOKEN": SECRET, "TB_T_KEY": SECRET})
    message = str(raised.value)
    assert str(task.path / "task.toml") in message
    assert "verifier.env.API_URL" in message and "TB_T_URL" in message
    assert SECRET not in message
    task.check_env_vars({"TB_T_TOKEN": "a", "TB_T_URL": "b"}, include_solution=False)
