"""A session on a two-node Ray cluster (docs/sessions.md, docs/cluster.md): placed like a
trial on a node with room for it, each call carried to the node that holds its sandbox.

Shown here: examples/hello-oracle solved by commands and files through the engine's
`open_session`, the node's refusals arriving as the same exceptions, verified on the node
with reward 1; the session's folder comes back to the driver's jobs folder with the node
recorded, and no container is left on either engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import TrialEngine, TrialResult
from orchestrator.common.errors import SessionClosedError, SessionPathError
from tests.conftest import EXAMPLES, our_containers
from tests.ray.conftest import TwoEngines

pytestmark = [pytest.mark.ray, pytest.mark.docker]

HELLO = EXAMPLES / "hello-oracle"


async def test_a_session_on_a_node_solves_hello_oracle_by_commands(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    config = two_engines.config(tmp_path)
    async with TrialEngine(config=config, task=HELLO, job_id="ray-sessions") as engine:
        async with await engine.open_session(
            session_id="ray::s1", metadata={"label": "secret"}
        ) as session:
            assert session.status == "ready" and session.result.node is not None
            looked = await session.exec("ls /tests 2>&1; echo $((6 * 7))")
            await session.write_file("/app/draft.txt", b"Hello, trialbox!\n")
            draft = await session.read_file("/app/draft.txt")
            with pytest.raises(SessionPathError):
                await session.read_file("/tests/test.sh")
            with pytest.raises(FileNotFoundError):
                await session.read_file("/app/none.txt")
            moved = await session.exec(argv=["cp", "/app/draft.txt", "/app/hello.txt"])
            said = await session.exec("cat /app/hello.txt; echo oops >&2; exit 3", cwd="/app")
            result = await session.verify()
            with pytest.raises(SessionClosedError, match="is closed"):
                await session.exec("true")
        assert engine.sessions == {}

    assert "No such file" in looked.stdout and looked.stdout.endswith("42\n")
    assert draft == b"Hello, trialbox!\n" and moved.exit_code == 0
    assert (said.exit_code, said.stdout, said.stderr) == (3, "Hello, trialbox!\n", "oops\n")
    assert said.channel  # the node's Docker sandbox has a command channel
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert result.agent_spec == "session" and result.session_id == "ray::s1"
    assert result.node is not None
    assert result.node.engine in (two_engines.first_host, two_engines.second_host)
    trial_dir = Path(result.trial_dir)
    assert trial_dir.parent == (config.jobs_dir / "ray-sessions").resolve()
    written = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
    assert written.reward == 1.0 and written.node == result.node
    assert (trial_dir / "logs" / "agent" / "trajectory.json").is_file()
    for client in (two_engines.first, two_engines.second):
        assert our_containers(client) == []
    assert [p for p in two_engines.scratch.rglob("session-*") if p.is_dir()] == []
