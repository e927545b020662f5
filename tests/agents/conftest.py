"""The agents' tests: the python-less image of tests/images (built once per session)."""

from __future__ import annotations

from tests.images.conftest import no_python

__all__ = ["no_python"]
