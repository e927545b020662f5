"""Without Chromium the browser tests fail and say how to get it; they never skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.browser import chromium


def test_a_missing_chromium_fails_with_the_way_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser on it
    monkeypatch.delenv("TRIALBOX_CHROMIUM", raising=False)

    with pytest.raises(pytest.fail.Exception, match=r"scripts/ensure-browser\.sh"):
        chromium()
