"""Files placed in a Docker container before its start (`SandboxSpec.files`,
`backends/docker/prestart.py`): written straight into its writable layer where that is safe,
else copied by the engine, and the two leave the same tree; an archive of another shape, a
remote engine, or a container whose mounts meet the archive's paths takes the engine's copy;
a cancel during the create leaves no container."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import docker
import pytest

from container_runtime.contract import ContainerInput
from orchestrator import TrialConfig
from orchestrator.backends.docker import prestart
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.common.archive import tar_of_files
from orchestrator.common.ids import new_id
from orchestrator.sandbox import SandboxSpec
from orchestrator.trials.materialize import skeleton_tar
from tests.conftest import EXAMPLES, ensure_task_image

Entry = tuple[str, bytes | None, int, tuple[int, int]]  # name, data (None: a folder), mode, owner


def tar_of(*entries: Entry) -> bytes:
    """An archive of these entries in this order (`tar_of_files` sorts, with one owner)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data, mode, (uid, gid) in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid, info.mtime = mode, uid, gid, 0
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


ROOT, NOBODY = (0, 0), (65534, 65534)
# Root's folder of its own, a folder the image has (/etc: merged, not hidden), nobody's folder.
FILES = tar_of(
    ("box", None, 0o750, ROOT),
    ("box/open", None, 0o777, ROOT),
    ("etc", None, 0o755, ROOT),
    ("box/a.txt", b"alpha\n", 0o640, ROOT),
    ("box/open/b.sh", b"#!/bin/sh\n", 0o755, ROOT),
    ("etc/trialbox-probe", b"probe\n", 0o644, ROOT),
    ("mine", None, 0o700, NOBODY),
    ("mine/x", b"x\n", 0o600, NOBODY),
)
LISTING = (
    "stat -c '%n %a %u:%g %Y %F' /box /box/a.txt /box/open /box/open/b.sh /etc "
    "/etc/trialbox-probe /mine /mine/x && cat /box/a.txt /etc/trialbox-probe && "
    "test -s /etc/passwd && echo image-kept"
)
SKELETON = skeleton_tar(ContainerInput(instruction="Do it.\n", trial_id="t1"))


def can_write_root_files() -> bool:
    return os.geteuid() == 0 and not prestart.SELINUX.exists()


def created(upper: Path, **changes: Any) -> dict[str, Any]:
    """An engine's inspect of a created container whose writable layer is `upper`."""
    attrs: dict[str, Any] = {
        "GraphDriver": {"Name": "overlay2", "Data": {"UpperDir": str(upper)}},
        "Mounts": [],
        "HostConfig": {},
    }
    return attrs | changes


# -- the archive's shape ------------------------------------------------------------------------


def test_the_skeleton_and_plain_trees_can_be_written_into_the_layer() -> None:
    skeleton = prestart.layer_members(SKELETON)
    assert skeleton is not None
    assert skeleton[0].name == "logs"  # parents first
    members = prestart.layer_members(FILES)
    assert members is not None
    assert [(m.name, m.mode, m.uid) for m in members if m.name.startswith("mine")] == [
        ("mine", 0o700, 65534),
        ("mine/x", 0o600, 65534),
    ]
    assert prestart.layer_members(tar_of_files({"at-the-root.txt": b"x"})) is not None


@pytest.mark.parametrize(
    "archive",
    [
        tar_of_files({"tmp/loose.txt": b"x"}),  # its folder is not the archive's
        tar_of_files({"link": (b"/etc/passwd", stat.S_IFLNK | 0o777)}),
        tar_of_files({"../up.txt": b"x"}),
        tar_of_files({"a/../b.txt": b"x"}, dirs={"a": 0o755}),
        tar_of(("a.txt", b"1", 0o644, ROOT), ("a.txt", b"2", 0o644, ROOT)),
        b"not a tar archive",
    ],
    ids=["folder-not-given", "symlink", "dotdot", "not-normal", "twice", "not-tar"],
)
def test_an_archive_of_another_shape_takes_the_engines_copy(archive: bytes) -> None:
    assert prestart.layer_members(archive) is None


# -- the layer -------------------------------------------------------------------------------------


@pytest.mark.skipif(not can_write_root_files(), reason="the layer is used only by root")
def test_the_layer_is_used_only_when_no_mount_meets_the_archive(tmp_path: Path) -> None:
    upper = tmp_path / "diff"
    upper.mkdir()
    names = ["logs", "logs/agent"]
    assert prestart.writable_layer(created(upper), names) == upper
    for meeting in (
        {"Mounts": [{"Destination": "/logs/agent"}]},  # a volume inside it
        {"Mounts": [{"Destination": "/logs"}]},
        {"Mounts": [{"Destination": "/"}]},
        {"HostConfig": {"Tmpfs": {"/logs": ""}}},
        {"HostConfig": {"Binds": ["/srv:/logs:ro"]}},
        {"HostConfig": {"Mounts": [{"Target": "/logs/agent/deep"}]}},
    ):
        assert prestart.writable_layer(created(upper, **meeting), names) is None, meeting
    gateway = {"Mounts": [{"Destination": "/run/trialbox-gateway"}]}
    assert prestart.writable_layer(created(upper, **gateway), names) == upper
    assert prestart.writable_layer(created(upper, **{"Mounts": [{"Destination": "/log"}]}), names)
    btrfs = created(upper, GraphDriver={"Name": "btrfs", "Data": {"UpperDir": str(upper)}})
    assert prestart.writable_layer(btrfs, names) is None
    assert prestart.writable_layer(created(tmp_path / "elsewhere"), names) is None
    (upper / "written").write_text("by someone")
    assert prestart.writable_layer(created(upper), names) is None  # not a fresh layer


def test_a_remote_engine_takes_the_engines_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2376")
    assert prestart.writable_layer(created(tmp_path), ["logs"]) is None


def test_the_layer_gets_the_archives_names_modes_owners_and_times(tmp_path: Path) -> None:
    mine = (os.getuid(), os.getgid())
    archive = tar_of_files(
        {"box/a.txt": (b"alpha\n", 0o640), "box/open/b.sh": (b"#!/bin/sh\n", 0o755)},
        dirs={"box": 0o750, "box/open": 0o777},
        owner=mine,
    )
    members = prestart.layer_members(archive)
    assert members is not None
    prestart.write_layer(tmp_path, members)

    def seen(relative: str) -> tuple[int, int, tuple[int, int]]:
        found = (tmp_path / relative).lstat()
        return stat.S_IMODE(found.st_mode), int(found.st_mtime), (found.st_uid, found.st_gid)

    assert seen("box") == (0o750, 0, mine)
    assert seen("box/open") == (0o777, 0, mine)  # not cut by the umask
    assert seen("box/a.txt") == (0o640, 0, mine)
    assert seen("box/open/b.sh") == (0o755, 0, mine)
    assert (tmp_path / "box" / "a.txt").read_bytes() == b"alpha\n"


# -- on the engine ---------------------------------------------------------------------------------


def spec(image: str, owner: str, files: bytes | None) -> SandboxSpec:
    return SandboxSpec(
        image=image, trial_id=new_id("prestart"), job_id=new_id("job-prestart"), owner=owner,
        files=files,
    )  # fmt: skip


async def listing(image: str, owner: str) -> str:
    sandbox = await DockerSandbox.create(spec(image, owner, FILES))
    try:
        seen = await sandbox.exec(LISTING)
    finally:
        await sandbox.destroy()
    assert seen.exit_code == 0, seen.output
    return seen.output


async def test_written_into_the_layer_or_copied_by_the_engine_the_tree_is_the_same(
    config: TrialConfig, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = await ensure_task_image(config, EXAMPLES / "hello-oracle")
    written: list[Path] = []
    write_layer = prestart.write_layer

    def noted(upper: Path, members: Any) -> None:
        written.append(upper)
        write_layer(upper, members)

    monkeypatch.setattr(prestart, "write_layer", noted)
    direct = await listing(image, config.owner)
    monkeypatch.setattr(prestart, "writable_layer", lambda attrs, names: None)
    copied = await listing(image, config.owner)

    assert direct == copied
    assert direct.splitlines()[:4] == [
        "/box 750 0:0 0 directory",
        "/box/a.txt 640 0:0 0 regular file",
        "/box/open 777 0:0 0 directory",
        "/box/open/b.sh 755 0:0 0 regular file",
    ]
    assert "/mine/x 600 65534:65534 0 regular file" in direct
    assert direct.endswith("alpha\nprobe\nimage-kept\n")
    local = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    layered = docker_client.info().get("Driver") in prestart.LAYER_DRIVERS
    assert len(written) == (1 if can_write_root_files() and local and layered else 0)


async def test_an_archive_the_layer_cannot_take_is_copied_by_the_engine(
    config: TrialConfig,
) -> None:
    image = await ensure_task_image(config, EXAMPLES / "hello-oracle")
    loose = tar_of_files({"tmp/loose.txt": (b"loose\n", 0o600)})  # /tmp is the image's
    sandbox = await DockerSandbox.create(spec(image, config.owner, loose))
    try:
        seen = await sandbox.exec("stat -c '%a %u' /tmp/loose.txt /tmp && cat /tmp/loose.txt")
    finally:
        await sandbox.destroy()
    assert seen.output == "600 0\n1777 0\nloose\n"  # the image's /tmp as it was


async def test_a_create_cancelled_while_it_places_files_leaves_no_container(
    config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    image = await ensure_task_image(config, EXAMPLES / "hello-oracle")
    for delay in (0.0, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3):
        made = spec(image, config.owner, SKELETON)
        creating = asyncio.ensure_future(DockerSandbox.create(made))
        await asyncio.sleep(delay)
        creating.cancel()
        try:
            sandbox = await creating
        except asyncio.CancelledError:
            pass
        else:  # it was ready before the cancel came
            await sandbox.destroy()
        left = await asyncio.to_thread(
            docker_client.containers.list, all=True, filters={"name": made.name}
        )
        assert left == [], f"cancelled after {delay} s, {made.name} was left"
