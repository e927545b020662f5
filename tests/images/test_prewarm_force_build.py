"""`trialbox prewarm --force-build` and `prewarm(force_build=True)` build the Dockerfile's
image, the one trials with `TrialConfig.force_build` use (on the fake backend, no engine)."""

from __future__ import annotations

from pathlib import Path

from orchestrator import load_task
from orchestrator.backends.fake import FakeBackend
from orchestrator.cli import build_parser
from orchestrator.service.prewarm import prewarm
from tests.conftest import write_task


async def test_prewarm_passes_force_build_through(tmp_path: Path) -> None:
    task = load_task(
        write_task(
            tmp_path,
            "both",
            dockerfile="FROM x:1\n",
            task_toml='[environment]\ndocker_image = "x:1"\n',
        )
    )
    backend = FakeBackend()

    (plain,) = await prewarm([task], backend=backend)
    (forced,) = await prewarm([task], backend=backend, force_build=True)

    assert plain.tag != forced.tag
    assert (plain.status, forced.status) == ("built", "built")
    assert forced.tag == (await backend.plan_image(task, {}, force_build=True)).tag
    args = build_parser().parse_args(["prewarm", "--force-build", str(tmp_path)])
    assert args.force_build is True
    assert build_parser().parse_args(["prewarm", str(tmp_path)]).force_build is False
