"""The verifier's one exec (`verifier.verify_at_once`) on a real engine, from each of its two
stagings: tests/ (and the conversation to hand over) written from the host into the
sandbox's read-only slot folder and copied into place (a local engine), or uploaded to a
root-only folder at the root and moved (where no host folder can be mounted). Either way
test.sh finds /tests root's (0700), the conversation becomes the agent's trajectory.json
unless the agent saved its own, the reward is the snapshot's, and nothing staged is left."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import TrialConfig
from orchestrator.sandbox.spec import SLOT_DIR
from orchestrator.trials.verifier import Staging, VerifierSetup, verify_at_once
from tests.conftest import docker_sandbox

pytestmark = pytest.mark.docker

# Rewards 1 only when /tests is root's 0700 with its files, and no upload is left at the root.
TEST_SH = (
    "set -- /.trialbox-verifier-*\n"
    '[ ! -e "$1" ] && [ "$(stat -c %a:%u /tests)" = "700:0" ] && [ -x /tests/helper.sh ] '
    "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)


def make_tests(root: Path) -> Path:
    tests = root / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(TEST_SH)
    (tests / "helper.sh").write_text("true\n")
    (tests / "helper.sh").chmod(0o755)
    return tests


@pytest.mark.parametrize("slot", [True, False], ids=["slot-folder", "upload"])
async def test_each_staging_places_the_tests_hands_over_and_leaves_nothing(
    config: TrialConfig, tmp_path: Path, slot: bool
) -> None:
    async with docker_sandbox(
        config, name="staging", slot_mount=SLOT_DIR if slot else None
    ) as sandbox:
        staging = Staging.for_sandbox(sandbox)
        assert (staging.host is not None) == slot
        assert staging.inside.startswith(SLOT_DIR if slot else "/.trialbox-verifier-")

        done = await verify_at_once(
            sandbox, make_tests(tmp_path), VerifierSetup(timeout_sec=30), config.limits,
            memory_mb=2048, staging=staging, trajectory=b'{"steps": []}',
        )  # fmt: skip

        assert done is not None and done.handed_over
        assert done.run.exit_code == 0
        assert done.run.snapshot is not None and done.run.snapshot.rewards() == {"reward": 1.0}
        handed = await sandbox.exec(
            "stat -c %a:%u /logs/agent/trajectory.json && cat /logs/agent/trajectory.json"
        )
        assert handed.output == '644:0\n{"steps": []}'
        left = await sandbox.exec(f"ls -A / {SLOT_DIR} 2>/dev/null | grep -c trialbox-verifier")
        assert left.output.strip() == "0"
        if staging.host is not None:
            assert not staging.host.exists()
            assert not Path(f"{staging.host}.trajectory.json").exists()


async def test_the_agent_s_own_trajectory_is_kept(config: TrialConfig, tmp_path: Path) -> None:
    """The agent saved a trajectory of its own: the conversation is not handed over."""
    async with docker_sandbox(config, name="staging", slot_mount=SLOT_DIR) as sandbox:
        saved = await sandbox.exec(
            "mkdir -p /logs/agent && echo mine > /logs/agent/trajectory.json"
        )
        assert saved.exit_code == 0, saved.output

        done = await verify_at_once(
            sandbox, make_tests(tmp_path), VerifierSetup(timeout_sec=30), config.limits,
            memory_mb=2048, staging=Staging.for_sandbox(sandbox), trajectory=b"{}",
        )  # fmt: skip

        assert done is not None and not done.handed_over
        assert (await sandbox.exec("cat /logs/agent/trajectory.json")).output == "mine\n"
