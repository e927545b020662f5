"""The reward snapshot the verifier's exec prints when tests/test.sh exits (no engine):
what `parse_snapshot` accepts and refuses, and what `changed_after` warns of."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from orchestrator.common.errors import RewardFileError
from orchestrator.trials.rewards import (
    SNAPSHOT_CAP,
    RewardSnapshot,
    changed_after,
    parse_snapshot,
)

MARK = "trialbox-reward-0123456789abcdef"


def od(data: bytes) -> str:
    """`od -An -v -tx1` of `data`: 16 bytes a line, each a space and two hex digits."""
    rows = [data[i : i + 16] for i in range(0, len(data), 16)]
    return "".join("".join(f" {b:02x}" for b in row) + "\n" for row in rows)


def printed(files: dict[str, bytes | str], *, end: bool = True) -> str:
    """The exec's output as `sandbox.commands.RunVerifier` prints it (str: `MARK name other`)."""
    out = "test.sh said something\n"
    for name, data in files.items():
        if isinstance(data, str):
            out += f"{MARK} {name} {data}\n"
        else:
            out += f"{MARK} {name}\n{od(data)}"
    return out + (f"{MARK} end\n" if end else "")


def test_a_whole_snapshot_gives_the_files_and_reward_json_wins() -> None:
    json_text = b'{"reward": 0.5, "style": 1}'
    snapshot = parse_snapshot(printed({"reward.json": json_text, "reward.txt": b"1\n"}), MARK)

    assert snapshot is not None
    assert snapshot.files == {"reward.json": json_text, "reward.txt": b"1\n"}
    assert snapshot.rewards() == {"reward": 0.5, "style": 1.0}
    assert snapshot.digests()["reward.txt"] == hashlib.sha256(b"1\n").hexdigest()
    only_txt = parse_snapshot(printed({"reward.txt": b"0.25\n"}), MARK)
    assert only_txt is not None and only_txt.files["reward.json"] is None
    assert only_txt.rewards() == {"reward": 0.25}


@pytest.mark.parametrize(
    "output",
    [
        printed({"reward.txt": b"1\n"}, end=False),  # the exec cut short
        "no od in the image: nothing printed\n",
        printed({"reward.txt": b"1\n"}).replace(MARK, "trialbox-reward-another"),
        f"{MARK} reward.txt\n 3\n{MARK} end\n",  # half a byte
        f"{MARK} reward.txt\n zz 0a\n{MARK} end\n",  # not hex
    ],
    ids=["no-end", "nothing", "another-mark", "odd-length-hex", "bad-hex"],
)
def test_an_incomplete_or_garbled_snapshot_is_none(output: str) -> None:
    """None: the collected copy is scored instead, with a warning saying so."""
    assert parse_snapshot(output, MARK) is None


def test_what_the_snapshot_cannot_score_is_a_reward_file_error_naming_the_file() -> None:
    odd = parse_snapshot(printed({"reward.json": "other", "reward.txt": b"1\n"}), MARK)
    assert odd is not None and odd.odd == frozenset({"reward.json"})
    with pytest.raises(RewardFileError, match=r"reward\.json: not a regular file"):
        odd.rewards()
    cases = {
        b"": "empty",
        b"\xff\xfe\n": "not UTF-8",
        b"1" * (SNAPSHOT_CAP + 1): f"larger than {SNAPSHOT_CAP}",
    }
    for data, reason in cases.items():
        snapshot = parse_snapshot(printed({"reward.txt": data}), MARK)
        assert snapshot is not None
        with pytest.raises(RewardFileError, match=reason):
            snapshot.rewards()
    nothing = parse_snapshot(printed({}), MARK)
    assert nothing is not None
    with pytest.raises(RewardFileError, match="neither"):
        nothing.rewards()


def test_changed_after_warns_of_each_file_the_collected_copy_disagrees_on(
    tmp_path: Path,
) -> None:
    snapshot = RewardSnapshot({"reward.json": None, "reward.txt": b"1\n"})
    (tmp_path / "reward.txt").write_bytes(b"1\n")
    assert changed_after(snapshot, tmp_path) == []

    (tmp_path / "reward.txt").write_bytes(b"0\n")
    (tmp_path / "reward.json").write_text('{"reward": 1}')
    warnings = changed_after(snapshot, tmp_path)
    assert len(warnings) == 2
    appeared = next(w for w in warnings if "reward.json" in w)
    changed = next(w for w in warnings if "reward.txt" in w)
    assert "appeared after tests/test.sh exited" in appeared and "not scored" in appeared
    assert "changed after tests/test.sh exited" in changed
    assert hashlib.sha256(b"1\n").hexdigest() in changed
    assert hashlib.sha256(b"0\n").hexdigest() in changed

    (tmp_path / "reward.json").unlink()
    (tmp_path / "reward.txt").unlink()
    (gone,) = changed_after(snapshot, tmp_path)
    assert "reward.txt changed" in gone and "the collected copy is absent" in gone
