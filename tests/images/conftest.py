"""A local image with `sh` and no python3, built once per session from the offline base image.

Its tag has the test prefix, so the session's image cleanup (tests/conftest.py) removes it,
and with it every task image built from it and every tag put on it.
"""

from __future__ import annotations

import io

import docker
import pytest

from tests.conftest import BASE_IMAGE, TEST_IMAGE_PREFIX

NO_PYTHON = f"{TEST_IMAGE_PREFIX}no-python:bookworm"


@pytest.fixture(scope="session")
def no_python(docker_ready: docker.DockerClient) -> str:
    """The tag of a local image that has `sh` and no python3 at all."""
    dockerfile = f"FROM {BASE_IMAGE}\nRUN rm -rf /usr/bin/python3* /usr/lib/python3*\n"
    docker_ready.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=NO_PYTHON, rm=True, forcerm=True, pull=False
    )
    return NO_PYTHON
