"""The suite's image cleanup removes only what the tests made: an image trialbox built for a
test session carries that session's owner label; one of someone else's concurrent job, even
in trialbox's own repository and made while the tests ran, is left where it is."""

from __future__ import annotations

import io
import uuid

import docker
import docker.errors

from orchestrator.backends.docker.build import TASK_REPO
from tests.conftest import BASE_IMAGE, LABEL_OWNER, TEST_OWNER, remove_images_made_since


def _build(client: docker.DockerClient, tag: str, owner: str) -> str:
    dockerfile = f"FROM {BASE_IMAGE}\nRUN echo {uuid.uuid4().hex} > /made\n"
    image, _ = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels={LABEL_OWNER: owner},
        rm=True, forcerm=True, pull=False,
    )  # fmt: skip
    return str(image.id)


def _exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def test_an_image_of_another_owner_survives_the_cleanup(docker_ready: docker.DockerClient) -> None:
    before = {image.id for image in docker_ready.images.list(all=True)}
    suffix = uuid.uuid4().hex[:12]
    theirs = f"{TASK_REPO}:trialbox-test-theirs-{suffix}"
    ours = f"{TASK_REPO}:trialbox-test-ours-{suffix}"
    their_id = _build(docker_ready, theirs, "someone-else:4242")
    our_id = _build(docker_ready, ours, TEST_OWNER)
    try:
        problems = remove_images_made_since(docker_ready, before)
        assert _exists(docker_ready, their_id), "another owner's image was removed"
        assert not _exists(docker_ready, our_id), "the test owner's image was left"
        assert not any(ours in line or theirs in line for line in problems), problems
    finally:
        for ref in (theirs, ours):
            try:
                docker_ready.images.remove(ref)
            except docker.errors.ImageNotFound:
                pass
