"""A keyword TrialEngine does not take is answered with where it goes: a trial's option is
TrialConfig's (`config=TrialConfig(jobs_dir=...)`), a near miss of an engine option names it.
Refused before anything starts: no folder, no engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator import TrialEngine


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"jobs_dir": "jobs"}, "jobs_dir is a TrialConfig option: pass config=TrialConfig("),
        ({"keep_containers": True}, "keep_containers is a TrialConfig option"),
        ({"n_concurent": 2}, "TrialEngine has no option n_concurent; did you mean n_concurrent?"),
        ({"frobnicate": 1}, "TrialEngine has no option frobnicate"),
    ],
)
def test_a_misplaced_option_says_where_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: dict[str, Any], said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError) as raised:
        TrialEngine(**given)
    assert said in str(raised.value)
    assert list(tmp_path.iterdir()) == []
