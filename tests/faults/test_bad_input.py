"""Bad task folders fail at once, naming the file: a FIFO, a device, a socket, a folder or a
symlink out of the task where a file should be, and anything unsafe anywhere in the folder.
Nothing blocks (every load is bounded by a deadline here) and `trialbox run` refuses such a
task with exit code 1 before any container starts."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from orchestrator import TaskError, load_task
from orchestrator.tasks.task import discover_tasks
from tests.conftest import TEST_OWNER
from tests.faults.helpers import MAPPING, created_since, trialbox, within

# A load that does not block takes milliseconds; one that blocks never ends.
LOAD_WITHIN = 10

FILES = ["task.toml", "instruction.md", "tests/test.sh", "environment/Dockerfile"]


def _replace(task: Path, relative: str) -> Path:
    path = task / relative
    if path.exists():
        path.unlink()
    return path


def fifo(task: Path, relative: str, outside: Path) -> str:
    os.mkfifo(_replace(task, relative))
    return "is a FIFO, not a regular file"


def char_device(task: Path, relative: str, outside: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("making a device node (mknod) needs root")
    os.mknod(_replace(task, relative), 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # as /dev/zero
    return "is a character device, not a regular file"


def unix_socket(task: Path, relative: str, outside: Path) -> str:
    path = _replace(task, relative)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()  # the socket file stays
    return "is a socket, not a regular file"


def folder(task: Path, relative: str, outside: Path) -> str:
    _replace(task, relative).mkdir()
    return "is a folder, not a regular file"


def link_outside(task: Path, relative: str, outside: Path) -> str:
    outside.write_text("host file\n")
    _replace(task, relative).symlink_to(outside)
    return "a symlink pointing outside the task"


def link_to_dev_zero(task: Path, relative: str, outside: Path) -> str:
    _replace(task, relative).symlink_to("/dev/zero")
    return "a symlink pointing outside the task"


def link_to_inner_fifo(task: Path, relative: str, outside: Path) -> str:
    os.mkfifo(task / "pipe")
    _replace(task, relative).symlink_to(task / "pipe")
    return "is a symlink to a FIFO, not a regular file"


def link_loop(task: Path, relative: str, outside: Path) -> str:
    _replace(task, relative).symlink_to(task / relative)
    return "a symlink that cannot be resolved"


Plant = Callable[[Path, str, Path], str]
PLANTS = [fifo, char_device, unix_socket, folder, link_outside, link_to_dev_zero,
          link_to_inner_fifo, link_loop]  # fmt: skip


@pytest.mark.parametrize("plant", PLANTS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("relative", FILES)
def test_load_task_refuses_a_file_that_is_not_regular_at_once(
    make_task, tmp_path: Path, relative: str, plant: Plant
) -> None:
    task = make_task("bad", task_toml="[agent]\ntimeout_sec = 5\n")
    message = plant(task, relative, tmp_path / "outside.txt")

    with pytest.raises(TaskError) as raised:
        within(LOAD_WITHIN, lambda: load_task(task))
    assert f"{task / relative}: " in str(raised.value)
    assert message in str(raised.value)


def test_a_fifo_task_toml_is_refused_even_without_other_files(make_task) -> None:
    """The folder is recognised as a task by its FIFO task.toml and refused naming it, not
    passed over as 'no task folder'."""
    task = make_task("only-fifo")
    (task / "instruction.md").unlink()
    os.mkfifo(task / "task.toml")

    with pytest.raises(TaskError, match=r"task\.toml: is a FIFO, not a regular file"):
        within(LOAD_WITHIN, lambda: discover_tasks(task))
    with pytest.raises(TaskError, match=r"task\.toml: is a FIFO, not a regular file"):
        within(LOAD_WITHIN, lambda: discover_tasks(task.parent))


@pytest.mark.parametrize(
    ("relative", "plant", "message"),
    [
        ("tests/data/pipe", lambda p, o: os.mkfifo(p), "is a FIFO, not a regular file or folder"),
        ("solution/secrets", lambda p, o: p.symlink_to(o), "a symlink pointing outside the task"),
        ("environment/ctx", lambda p, o: p.symlink_to(p.parent.parent / "tests"),
         "a symlink pointing outside the task"),  # out of the image's build context
    ],
    ids=["fifo-deep-inside", "symlink-out", "symlink-out-of-build-context"],
)  # fmt: skip
def test_load_task_checks_the_whole_folder(
    make_task, tmp_path: Path, relative: str, plant, message: str
) -> None:
    task = make_task("deep")
    (tmp_path / "outside").mkdir()
    path = task / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    plant(path, tmp_path / "outside")

    with pytest.raises(TaskError) as raised:
        within(LOAD_WITHIN, lambda: load_task(task))
    assert f"{path}: " in str(raised.value)
    assert message in str(raised.value)


def test_a_symlink_inside_the_task_to_a_regular_file_still_loads(make_task) -> None:
    task = make_task("linked", files={"docs/instruction.md": "Linked.\n"})
    (task / "instruction.md").unlink()
    (task / "instruction.md").symlink_to("docs/instruction.md")

    assert within(LOAD_WITHIN, lambda: load_task(task)).instruction == "Linked.\n"


def test_an_instruction_that_is_not_utf8_names_the_file(make_task) -> None:
    task = make_task("latin")
    (task / "instruction.md").write_bytes(b"caf\xe9\n")

    with pytest.raises(TaskError, match=r"instruction\.md: not UTF-8 text"):
        load_task(task)


@pytest.mark.parametrize("plant", [fifo, link_outside], ids=lambda p: p.__name__)
@pytest.mark.parametrize("relative", ["task.toml", "instruction.md", "tests/helper.sh"])
def test_trialbox_run_refuses_the_task_with_exit_1_before_any_container(
    docker_client: docker.DockerClient, make_task, tmp_path: Path, relative: str, plant: Plant
) -> None:
    task = make_task("refused")
    message = plant(task, relative, tmp_path / "outside.txt")
    since = time.time()

    done = trialbox("run", str(task), "--jobs-dir", str(tmp_path / "jobs"), *MAPPING, timeout=60)

    assert done.returncode == 1, done.stdout + done.stderr
    assert str(task / relative) in done.stdout
    assert message in done.stdout
    assert not (tmp_path / "jobs").exists()
    assert created_since(docker_client, since, TEST_OWNER) == []
