"""Shared fixtures: a checked Docker engine, a trial config, leak checks, task folders.

Tests that depend on Docker's behaviour talk to the real engine, and a missing engine or base
image is a failure with instructions, never a silent skip. Every test that needs the engine
carries the `docker` marker: set explicitly, or added here to any test that uses the engine's
fixtures, so `pytest -m "not docker"` runs everything else (the fake backend, the relay's
state machine, the loader, the server's routes) on a machine without an engine.

No test leans on what another left behind: a test that needs a task's image asks for it
(`ensure_task_image`, cheap when cached), every container of ours is checked for after each
test, and the images the session built, and only those, are removed at its end
(`session_images`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from orchestrator import TrialConfig, load_task
from orchestrator.backends import build_backend
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.leftovers import slot_folder_of
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.common.ids import new_id
from orchestrator.sandbox import SandboxSpec

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
# The offline base image, as scripts/build-base-image.sh builds it (TRIALBOX_BASE_IMAGE names
# another tag there and here), and the version of it the tests need (its VERSION).
BASE_IMAGE = os.environ.get("TRIALBOX_BASE_IMAGE") or "trialbox-base/python3:bookworm"
BASE_IMAGE_SCRIPT = REPO_ROOT / "scripts" / "build-base-image.sh"
OFFICIAL_IMAGE = "python:3.11-slim-bookworm"
BASE_IMAGE_MAP = {OFFICIAL_IMAGE: BASE_IMAGE}
DEFAULT_DOCKERFILE = f"FROM {OFFICIAL_IMAGE}\nWORKDIR /app\n"
LABEL_TRIAL = "trialbox.trial"
LABEL_OWNER = "trialbox.owner"
# The prefix of the tags tests build themselves.
TEST_IMAGE_PREFIX = "trialbox-test-"

# Ray (2.5x and later) turns on token authentication for every new local cluster and writes a
# token to ~/.ray/auth_token; from then on every Ray process on the machine that finds the
# token but no RAY_AUTH_MODE switches mode on its own, and the test clusters (which bind to
# 127.0.0.1 only) lose their drivers. Saying the mode once here, for this process and every
# process the tests start, keeps them agreeing and leaves no token file behind.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Every trial this test session starts is labelled with this owner, and so is every image it
# has trialbox build (`trialbox.owner`, from TRIALBOX_OWNER), so the leak check and the image
# cleanup below find exactly ours and never touch those of someone else using the engine.
TEST_OWNER_PREFIX = "trialbox-tests-"
TEST_OWNER = f"{TEST_OWNER_PREFIX}{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """A client of an engine that answers; fails the session with instructions otherwise."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        pytest.fail(
            f"the Docker engine does not answer ({exc}); start it with scripts/ensure-docker.sh "
            "(or make DOCKER_HOST point at a running engine) and rerun",
            pytrace=False,
        )
    yield client
    client.close()


@pytest.fixture(scope="session")
def docker_ready(
    docker_client: docker.DockerClient, session_images: set[str]
) -> docker.DockerClient:
    """The engine answers and holds the offline base image the examples are mapped onto, of
    the version scripts/build-base-image.sh builds (an older one has no pip)."""
    try:
        image = docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(
            f"the base image {BASE_IMAGE} is missing; build it with scripts/build-base-image.sh "
            "and rerun",
            pytrace=False,
        )
    wanted = re.search(r"^VERSION=(\d+)$", BASE_IMAGE_SCRIPT.read_text(), re.MULTILINE)
    have = (image.labels or {}).get("trialbox.base-version", "1")
    if wanted is not None and have != wanted.group(1):
        pytest.fail(
            f"the base image {BASE_IMAGE} is of version {have}, the tests need version "
            f"{wanted.group(1)} (with pip); rebuild it with scripts/build-base-image.sh and rerun",
            pytrace=False,
        )
    return docker_client


@pytest.fixture(scope="session", autouse=True)
def _test_owner() -> Iterator[str]:
    """Trials started with a default config (or in a subprocess) carry our owner label too."""
    previous = os.environ.get("TRIALBOX_OWNER")
    os.environ["TRIALBOX_OWNER"] = TEST_OWNER
    yield TEST_OWNER
    if previous is None:
        os.environ.pop("TRIALBOX_OWNER", None)
    else:
        os.environ["TRIALBOX_OWNER"] = previous


def our_containers(client: docker.DockerClient) -> list:
    """Containers of this test session (running or not)."""
    return client.containers.list(
        ignore_removed=True,
        all=True,
        filters={"label": [LABEL_TRIAL, f"{LABEL_OWNER}={TEST_OWNER}"]},
    )


ENGINE_FIXTURES = {"docker_client", "docker_ready", "config", "container_watch"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the engine's fixtures needs the engine: mark it `docker`."""
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)


def _built_by_the_suite(image: Any) -> bool:
    """An image trialbox built for a test session (its `trialbox.owner` label names one: any
    session's, since the last one out removes for all), or one with a test's own tag; never
    the base image, nor an image of someone else's job, however it is tagged. Untagged layers
    without the label (a failed build's last step) are left: nothing says whose they are."""
    if BASE_IMAGE in image.tags:
        return False
    if (image.labels or {}).get(LABEL_OWNER, "").startswith(TEST_OWNER_PREFIX):
        return True
    return any(tag.startswith(TEST_IMAGE_PREFIX) for tag in image.tags)


def remove_images_made_since(client: docker.DockerClient, before: set[str]) -> list[str]:
    """Remove the suite's images (`_built_by_the_suite`) whose ids are not in `before`; what
    could not be removed."""
    problems: list[str] = []
    for _ in range(2):  # a second pass for an untagged image its removed child uncovered
        made = [
            image
            for image in client.images.list()
            if image.id not in before and _built_by_the_suite(image)
        ]
        # Newest first, so a child goes before the image it was built from.
        made.sort(key=lambda image: image.attrs.get("Created", ""), reverse=True)
        for image in made:
            for ref in image.tags or [image.id]:
                try:
                    client.images.remove(ref)
                except docker.errors.ImageNotFound:
                    pass
                except docker.errors.APIError as exc:  # e.g. in use by someone's container
                    problems.append(f"{ref}: {exc.explanation or exc}")
        if not made:
            break
    return problems


class EngineSessions:
    """The test sessions using one engine at the same time, so that only the last one out
    removes what they built: a session that removed the tools image or a task image another
    session had just built would break that session's next build or container.

    Each session registers its pid under a lock; the shared baseline is the set of image ids
    present before the first of them started. Entries of dead sessions are ignored.
    """

    def __init__(self, engine_id: str) -> None:
        self.dir = Path(tempfile.gettempdir()) / "trialbox-test-sessions" / engine_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.baseline_file = self.dir / "baseline.json"
        self.entry = self.dir / f"session-{os.getpid()}"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with (self.dir / "lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _others_alive(self) -> bool:
        alive = False
        for entry in self.dir.glob("session-*"):
            if entry == self.entry:
                continue
            try:
                os.kill(int(entry.name.removeprefix("session-")), 0)
                alive = True
            except ProcessLookupError:
                entry.unlink(missing_ok=True)  # a session that died without leaving
            except (PermissionError, ValueError):
                alive = True
        return alive

    def join(self, before: set[str]) -> None:
        with self.locked():
            if self._others_alive() and self.baseline_file.exists():
                before &= set(json.loads(self.baseline_file.read_text()))
            self.baseline_file.write_text(json.dumps(sorted(before)))
            self.entry.touch()

    def leave(self, sweep: Callable[[set[str]], None]) -> bool:
        """Unregister; the last session out runs `sweep(baseline)` (under the lock, so a
        session starting meanwhile sees the engine after it). Whether it swept."""
        with self.locked():
            self.entry.unlink(missing_ok=True)
            if self._others_alive():
                return False
            baseline = set(json.loads(self.baseline_file.read_text()))
            self.baseline_file.unlink()
            sweep(baseline)
            return True


@pytest.fixture(scope="session")
def session_images(
    docker_client: docker.DockerClient, pytestconfig: pytest.Config
) -> Iterator[set[str]]:
    """The image ids present before the first engine test; at the end of the session the
    images the suite built (labelled with a test owner, or tagged trialbox-test-*) that were
    not among them are removed. The base image always stays. Sessions
    that share the engine at the same time leave the removal to the last one of them."""
    before = {image.id for image in docker_client.images.list(all=True)}
    sessions = EngineSessions(docker_client.info().get("ID", "engine").replace(":", "-"))
    sessions.join(before)
    yield before
    problems: list[str] = []
    sessions.leave(
        lambda baseline: problems.extend(remove_images_made_since(docker_client, baseline))
    )
    if problems:
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("images the suite built that could not be removed:", yellow=True)
            for line in problems:
                reporter.write_line(f"  {line}", yellow=True)


@pytest.fixture(autouse=True)
def no_leftover_containers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test that needs the engine: no trial container of ours is left; any found
    is removed first. Tests without the `docker` marker never touch the engine."""
    if request.node.get_closest_marker("docker") is None:
        yield
        return
    docker_client = request.getfixturevalue("docker_client")
    request.getfixturevalue("session_images")  # noted before this test can build anything
    yield
    leftovers = our_containers(docker_client)
    names = [c.name for c in leftovers]
    for container in leftovers:
        remove_trial_container(container)
    assert not names, f"trial containers were left behind (now removed): {names}"


@pytest.fixture
def config(docker_ready: docker.DockerClient, tmp_path: Path) -> TrialConfig:
    """Trials map the official Python image onto the local one and write under tmp_path."""
    return TrialConfig(base_image_map=BASE_IMAGE_MAP, jobs_dir=tmp_path / "jobs", owner=TEST_OWNER)


async def ensure_task_image(config: TrialConfig, task: Path) -> str:
    """The task's image through the config's backend: built when missing, else found at once.

    A test that needs an image to exist before it starts (so that a wait or a timing means
    what it says) asks for it here instead of relying on an earlier test having built it.
    """
    backend = build_backend(config.backend, config.limits)
    built = await backend.ensure_image(load_task(task), config.base_image_map)
    return built.tag


def remove_trial_container(container: Container) -> None:
    """Remove a trial's container as `trialbox reap` does: with its slot folder on this host
    (`SandboxSpec.slot_mount`), which a removal straight through the engine leaves."""
    slot = slot_folder_of(container.attrs.get("Mounts") or [])
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True, v=True)
    if slot is not None:
        shutil.rmtree(slot, ignore_errors=True)


@contextlib.asynccontextmanager
async def docker_sandbox(
    config: TrialConfig, *, name: str = "sandbox", slot_mount: str | None = None
) -> AsyncIterator[DockerSandbox]:
    """A Docker sandbox of the hello-oracle example's image, destroyed after the block."""
    image = await ensure_task_image(config, EXAMPLES / "hello-oracle")
    spec = SandboxSpec(
        image=image, trial_id=new_id(name), job_id=new_id(f"job-{name}"), owner=config.owner,
        slot_mount=slot_mount,
    )  # fmt: skip
    sandbox = await DockerBackend(config.limits).create_sandbox(spec)
    assert isinstance(sandbox, DockerSandbox)
    try:
        yield sandbox
    finally:
        await sandbox.destroy()


class ContainerWatch:
    """Which containers the engine created for one job id while the watch was open.

    Read from the engine's event log, so a container that was created and removed again in
    between is seen too.
    """

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.job_id = f"job-{uuid.uuid4().hex[:12]}"
        self.since = time.time()

    def created(self) -> list[str]:
        events = self.client.events(
            since=f"{self.since - 0.5:.6f}",
            until=f"{time.time():.6f}",
            filters={
                "type": "container",
                "event": "create",
                "label": f"trialbox.job={self.job_id}",
            },
            decode=True,
        )
        return [e["Actor"]["Attributes"].get("name", "?") for e in events]


@pytest.fixture
def container_watch(docker_client: docker.DockerClient) -> ContainerWatch:
    """Pass `container_watch.job_id` as the job id; `created()` lists its containers."""
    return ContainerWatch(docker_client)


MakeTask = Callable[..., Path]


def write_task(
    root: Path,
    name: str = "task",
    *,
    instruction: str = "Do the thing.\n",
    dockerfile: str | None = DEFAULT_DOCKERFILE,
    test_sh: str = "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    solve_sh: str | None = None,
    task_toml: str | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """A task folder `root/name` made from strings; `None` leaves a file out."""
    folder = root / name
    folder.mkdir(parents=True)
    contents = {"instruction.md": instruction, "tests/test.sh": test_sh}
    if dockerfile is not None:
        contents["environment/Dockerfile"] = dockerfile
    if solve_sh is not None:
        contents["solution/solve.sh"] = solve_sh
    if task_toml is not None:
        contents["task.toml"] = task_toml
    contents.update(files or {})
    for relative, text in contents.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if path.suffix == ".sh":
            path.chmod(0o755)
    return folder


@pytest.fixture
def make_task(tmp_path: Path) -> MakeTask:
    """`make_task(name, instruction=..., dockerfile=..., test_sh=..., ...)` under tmp_path."""

    def make(name: str = "task", **kwargs: Any) -> Path:
        return write_task(tmp_path / "tasks", name, **kwargs)

    return make
