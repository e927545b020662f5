#!/usr/bin/env python3
"""Run every Harbor-format task in a folder with the oracle agent and print one row per task.

    python3 scripts/try_harbor_tasks.py TASKS_DIR [--parallel N] [--map PATTERN=LOCAL] ...

For people who have a folder of Harbor tasks (Harbor's examples, a Terminal-Bench 2 checkout)
on a machine without a registry: each task's FROM images (and its `[environment]
docker_image`) that match a pattern of the base map are built from a local image instead, and
each task gets its own `trialbox run`, so a task that trialbox refuses does not hide the
outcome of the others. The network is left as each task.toml asks (no --no-internet).

The base map: $TRIALBOX_TRY_BASE_MAP, comma-separated PATTERN=LOCAL entries (shell-style
globs, first match wins; a registry host and `library/` are ignored when matching), default
every ubuntu, debian and python:3 image -> $TRIALBOX_TRY_LOCAL_BASE (default
trialbox-base/python3:bookworm). `--map PATTERN=LOCAL` entries come before it. That base has
`python3` but neither `python` nor `pip`, which official python images have: tasks whose steps
call them fail until python images are mapped to a local image that has them.

Prebuilt `docker_image`s (Terminal-Bench 2 names one per task) cannot be pulled here: when
`trialbox run` offers `--force-build`, it is passed (TRIALBOX_TRY_FORCE_BUILD=auto|yes|no), so
the task's environment/Dockerfile is built instead, as `harbor run --force-build` does.

Output: a table (task, exit code, status, reward, error category, message, seconds), and in
the run's folder (under --jobs-dir) every task's `trialbox run` output and summary.json.
Exit code 0 when every task was run (whatever its outcome), 2 on bad arguments. Needs trialbox
installed (scripts/setup.sh) and a Docker engine; runs `python -m orchestrator.cli`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

LOCAL_BASE = os.environ.get("TRIALBOX_TRY_LOCAL_BASE", "trialbox-base/python3:bookworm")
DEFAULT_PATTERNS = ("ubuntu", "ubuntu:*", "debian", "debian:*", "python:3*")
DEFAULT_MAP = ",".join(f"{p}={LOCAL_BASE}" for p in DEFAULT_PATTERNS)
TRIALBOX = [sys.executable, "-m", "orchestrator.cli"]
FROM_LINE = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)


def parse_map(text: str) -> list[tuple[str, str]]:
    pairs = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        pattern, sep, local = entry.partition("=")
        if not sep or not pattern or not local:
            raise ValueError(f"base map entry {entry!r} is not PATTERN=LOCAL")
        pairs.append((pattern.strip(), local.strip()))
    return pairs


def bare(image: str) -> str:
    """The image's name without a registry host (a first component with a dot or a colon, or
    localhost) or the `library/` namespace, so `ubuntu:*` also matches their longer names."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        image = rest
    return image.removeprefix("library/")


def mapped(image: str, base_map: list[tuple[str, str]]) -> str | None:
    for pattern, local in base_map:
        if fnmatch.fnmatchcase(bare(image), pattern) or fnmatch.fnmatchcase(image, pattern):
            return local
    return None


def is_task(folder: Path) -> bool:
    return (folder / "task.toml").is_file() or (folder / "instruction.md").is_file()


def find_tasks(root: Path) -> list[Path]:
    """`root` itself, or every task folder under it (not inside another task), by path."""
    if is_task(root):
        return [root]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here != root and is_task(here):
            found.append(here)
            dirnames.clear()
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def task_images(task: Path) -> list[str]:
    """Every FROM image of environment/Dockerfile and the task.toml's docker_image."""
    images = []
    dockerfile = task / "environment" / "Dockerfile"
    if dockerfile.is_file():
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
        stages = set()
        for match in FROM_LINE.finditer(text):
            image = match[1]
            if image.lower() not in stages:
                images.append(image)
            tail = text[match.end() :].split("\n", 1)[0].split()
            if len(tail) >= 2 and tail[0].lower() == "as":
                stages.add(tail[1].lower())
    try:
        config = tomllib.loads((task / "task.toml").read_text(encoding="utf-8"))
        image = config.get("environment", {}).get("docker_image")
        if isinstance(image, str):
            images.append(image)
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        pass  # trialbox reports a broken task.toml itself
    return list(dict.fromkeys(images))


def cli_options() -> str:
    try:
        return subprocess.run(
            [*TRIALBOX, "run", "--help"], capture_output=True, text=True, timeout=120
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def command_for(task: Path, args: argparse.Namespace, help_text: str) -> list[str]:
    command = [*TRIALBOX, "run", str(task), "--agent", args.agent, "--jobs-dir", args.jobs_dir]
    command += ["--json"]
    map_flag = "--base-image-map" if "--base-image-map" in help_text else "--base-image"
    for image in task_images(task):
        local = mapped(image, args.base_map)
        if local and local != image:
            command += [map_flag, f"{image}={local}"]
    force = os.environ.get("TRIALBOX_TRY_FORCE_BUILD", "auto").lower()
    if force in ("yes", "1", "true") or (force == "auto" and "--force-build" in help_text):
        command.append("--force-build")
    return command + args.extra


def stop(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM (trialbox cancels its trials and removes their containers), then SIGKILL."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def one_line(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def run_one(task: Path, name: str, args: argparse.Namespace, help_text: str, logs: Path) -> dict:
    command = command_for(task, args, help_text)
    started = time.monotonic()
    out_path, err_path = logs / f"{name}.json", logs / f"{name}.log"
    with out_path.open("w") as out, err_path.open("w") as err:
        err.write("$ " + " ".join(command) + "\n")
        err.flush()
        process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        timed_out = False
        try:
            process.wait(args.task_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop(process, 120)
    row = {
        "task": name,
        "path": str(task),
        "exit": process.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "command": command,
        "log": str(err_path),
        "status": "",
        "reward": None,
        "category": "",
        "message": "",
        "warnings": [],
    }
    try:
        job = json.loads(out_path.read_text() or "null")
    except json.JSONDecodeError:
        job = None
    trials = (job or {}).get("trials") or []
    if trials:
        trial = trials[0]
        error = trial.get("error") or {}
        row.update(
            status=trial.get("status", ""),
            reward=trial.get("reward"),
            category=error.get("category", ""),
            message=one_line(error.get("message", "")),
            warnings=trial.get("warnings") or [],
            trial_dir=trial.get("trial_dir"),
        )
        if not error and row["reward"] is not None and trial.get("rewards"):
            row["message"] = one_line(json.dumps(trial["rewards"]))
        if row["warnings"]:
            shown = "; ".join(map(str, row["warnings"]))
            row["message"] = one_line(f"{row['message']} [warning: {shown}]".lstrip())
    else:
        lines = [ln for ln in err_path.read_text(errors="replace").splitlines()[1:] if ln]
        errors = [ln for ln in lines if ln.startswith("error:")]
        row.update(
            status="timeout"
            if timed_out
            else "refused"
            if process.returncode == 1
            else "no result",
            category="" if timed_out else "validation" if errors else "",
            message=one_line((errors or lines or ["(no output)"])[-1]),
        )
    return row


def table(rows: list[dict]) -> str:
    head = ("task", "exit", "status", "reward", "category", "seconds", "message")
    cells = [
        (
            r["task"],
            str(r["exit"]),
            r["status"],
            "" if r["reward"] is None else f"{r['reward']:g}",
            r["category"] or "-",
            f"{r['seconds']:.0f}",
            r["message"],
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head[:-1])]
    lines = []
    for row in (head, *cells):
        padded = [v.ljust(w) for v, w in zip(row, widths, strict=False)]
        lines.append("  ".join([*padded, row[-1]]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", type=Path, help="a task folder, or a folder holding task folders")
    parser.add_argument("--agent", default="oracle", help="the agent (default: oracle)")
    parser.add_argument("--jobs-dir", default="jobs", help="where trial folders go (default: jobs)")
    parser.add_argument(
        "--map", action="append", default=[], metavar="PATTERN=LOCAL", help="base map entry"
    )
    parser.add_argument("--parallel", type=int, default=1, help="tasks at once (default: 1)")
    parser.add_argument(
        "--task-timeout", type=float, default=3600.0, help="seconds per task (default: 3600)"
    )
    parser.add_argument("--only", action="append", default=[], help="task name glob (repeatable)")
    parser.add_argument(
        "extra", nargs="*", help="after --: more `trialbox run` arguments for every task"
    )
    args = parser.parse_args(argv)
    base = os.environ.get("TRIALBOX_TRY_BASE_MAP", DEFAULT_MAP)
    try:
        args.base_map = parse_map(",".join([*args.map, base]))
    except ValueError as exc:
        parser.error(str(exc))
    if not args.tasks.is_dir():
        parser.error(f"{args.tasks}: not a folder")
    tasks = find_tasks(args.tasks.resolve())
    names = {
        t: str(t.relative_to(args.tasks.resolve())) if t != args.tasks.resolve() else t.name
        for t in tasks
    }
    if args.only:
        tasks = [t for t in tasks if any(fnmatch.fnmatch(names[t], p) for p in args.only)]
    if not tasks:
        parser.error(f"{args.tasks}: no task folder found")
    help_text = cli_options()
    logs = Path(args.jobs_dir) / time.strftime("try-harbor-%Y%m%d-%H%M%S")
    logs.mkdir(parents=True, exist_ok=True)
    print(f"{len(tasks)} tasks; outputs in {logs}", file=sys.stderr)

    def job(task: Path) -> dict:
        row = run_one(task, names[task].replace("/", "__"), args, help_text, logs)
        row["task"] = names[task]
        print(
            f"  {row['task']}: {row['status']} {row['category']} {row['message'][:100]}",
            file=sys.stderr,
            flush=True,
        )
        return row

    with concurrent.futures.ThreadPoolExecutor(max(1, args.parallel)) as pool:
        rows = list(pool.map(job, tasks))
    (logs / "summary.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))
    counts: dict[str, int] = {}
    for r in rows:
        key = r["status"] + (f"/{r['category']}" if r["category"] else "")
        counts[key] = counts.get(key, 0) + 1
    solved = sum(1 for r in rows if r["status"] == "success" and (r["reward"] or 0) > 0)
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    print(f"\n{len(rows)} tasks, {solved} with a reward > 0; {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
