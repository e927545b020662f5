"""The offline base image carries what the official Python images carry: pip as `pip` and
`pip3`, usable as root (no PEP 668 marker), so a task's `RUN pip ...` works as it would on
`python:3.x-slim`."""

from __future__ import annotations

from orchestrator import TrialConfig, run_trial
from tests.conftest import DEFAULT_DOCKERFILE, MakeTask


async def test_a_dockerfile_that_runs_pip_builds_on_the_base_image(
    config: TrialConfig, make_task: MakeTask
) -> None:
    steps = (
        "RUN pip --version && pip3 --version && python -m pip --version\n"
        'RUN test ! -e "$(python3 -c \'import sysconfig; print(sysconfig.get_path("stdlib"))\')'
        '/EXTERNALLY-MANAGED"\n'
    )
    task = make_task(dockerfile=DEFAULT_DOCKERFILE + steps)
    result = await run_trial(task, "nop", config=config)
    assert result.error is None, result.error
    assert result.reward == 1.0
