"""Ground-truth labels for the verifier: one for the whole job (`--label`), or one per task
from a JSON Lines file (`--labels`), each line `{"task": "<task name>", "label": <any JSON>}`.

The label goes into the task's `metadata["label"]`, which reaches the verifier as
/tests/label.json and never the agent. A task without a line gets no label; a line that
names no task of the dataset is an error naming the file and the line, since a typo there
would silently score a task without its label.

`read_labels` reads the file.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any


def label_value(raw: object) -> object:
    """--label's text is JSON if it parses, else the string itself; a file's value as is."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def read_labels(path: Path, task_names: Collection[str]) -> dict[str, Any]:
    """{task name: label} from a labels file; `task_names` are the tasks that exist."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the labels file ({exc.strerror})") from None
    labels: dict[str, Any] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("task"), str):
            raise ValueError(f'{where}: expected {{"task": "<task name>", "label": ...}}')
        if "label" not in entry:
            raise ValueError(f'{where}: no "label" for task {entry["task"]!r}')
        name = entry["task"]
        if name not in task_names:
            raise ValueError(f"{where}: no task named {name!r} in the dataset")
        if name in labels:
            raise ValueError(f"{where}: a second label for task {name!r}")
        labels[name] = entry["label"]
    return labels
