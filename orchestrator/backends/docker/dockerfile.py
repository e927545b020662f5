"""The Dockerfile patch that bakes trialbox's venv into a task image, and base-image mapping.

Pure text in, text out: the same Dockerfile, tools image and mapping always give the same
bytes, so identical tasks hash to one tag and share one build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from container_runtime.paths import RUNTIME_PYTHON, VENV_DIR

UV_PATH = "/opt/trialbox/uv"
MIN_PYTHON = (3, 9)

_FROM = re.compile(
    r"^(?P<lead>\s*FROM\s+)(?P<flags>(?:--\S+\s+)*)(?P<image>\S+)(?P<rest>.*)$", re.IGNORECASE
)
_USER = re.compile(r"^\s*USER\s+(?P<user>\S+)", re.IGNORECASE)


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined, so an instruction is one line."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def map_base_images(text: str, mapping: Mapping[str, str]) -> str:
    """Replace FROM images named in `mapping` (e.g. python:3.11-slim-bookworm -> a local one)."""
    if not mapping:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        match = _FROM.match(line.rstrip("\n"))
        if match and match["image"] in mapping:
            newline = "\n" if line.endswith("\n") else ""
            line = f"{match['lead']}{match['flags']}{mapping[match['image']]}{match['rest']}"
            line += newline
        out.append(line)
    return "".join(out)


_AS = re.compile(r"\s+AS\s+(?P<alias>\S+)", re.IGNORECASE)


def _stages(text: str) -> list[tuple[str, str | None, str | None]]:
    """(base image, alias, last USER) of every stage, in order."""
    stages: list[tuple[str, str | None, str | None]] = []
    for line in _logical_lines(text):
        if match := _FROM.match(line):
            alias = _AS.match(match["rest"])
            stages.append((match["image"], alias["alias"].lower() if alias else None, None))
        elif (user := _USER.match(line)) and stages:
            image, alias, _ = stages[-1]
            stages[-1] = (image, alias, user["user"])
    return stages


def _resolve(text: str) -> tuple[str | None, str | None]:
    """(user, external image): the final stage's user, inherited through `FROM <stage>`, or,
    when no stage on the way sets one, the external image it comes from."""
    stages = _stages(text)
    if not stages:
        return None, None
    by_alias = {alias: i for i, (_, alias, _) in enumerate(stages) if alias}
    index: int | None = len(stages) - 1
    while index is not None:
        image, _alias, user = stages[index]
        if user is not None:
            return user, None
        parent = by_alias.get(image.lower())
        if parent is None or parent >= index:
            return None, image
        index = parent
    return None, None


def final_stage_user(text: str, image_users: Mapping[str, str] | None = None) -> str | None:
    """The user the final stage runs as: its own USER, one inherited from an earlier stage,
    or the default user of its external base image when `image_users` knows it."""
    user, image = _resolve(text)
    if user is None and image is not None and image_users:
        return image_users.get(image) or None
    return user


def final_stage_image(text: str) -> str | None:
    """The external image the final stage comes from, when no stage on the way sets a USER."""
    return _resolve(text)[1]


def runtime_block(tools_image: str, restore_user: str | None) -> str:
    """The block appended to the final stage; needs no network at build time."""
    need = ".".join(map(str, MIN_PYTHON))
    lines = [
        "",
        "# --- trialbox runtime layer (appended by trialbox) ---",
    ]
    if restore_user is not None:
        lines.append("USER root")
    lines += [
        f"COPY --from={tools_image} /uv {UV_PATH}",
        f"COPY --from={tools_image} /wheels /opt/trialbox/wheels",
        "RUN set -e; \\",
        '    py="$(command -v python3 || true)"; \\',
        '    if [ -z "$py" ]; then \\',
        f'      echo "trialbox: this image has no python3 on PATH; the runtime layer needs'
        f' CPython >= {need}" >&2; exit 1; fi; \\',
        f'    if ! "$py" -c "import sys; sys.exit(sys.version_info < {MIN_PYTHON})"; then \\',
        f'      echo "trialbox: $("$py" --version 2>&1) is too old; the runtime layer needs'
        f' CPython >= {need}" >&2; exit 1; fi; \\',
        f'    UV_PYTHON_DOWNLOADS=never {UV_PATH} venv --quiet --python "$py" {VENV_DIR}; \\',
        f"    UV_PYTHON_DOWNLOADS=never {UV_PATH} pip install --quiet --no-cache"
        f" --python {RUNTIME_PYTHON} --no-index --find-links /opt/trialbox/wheels"
        " trialbox-container-runtime; \\",
        "    rm -rf /opt/trialbox/wheels",
    ]
    if restore_user is not None:
        lines.append(f"USER {restore_user}")
    return "\n".join(lines) + "\n"


def patch_dockerfile(
    text: str,
    tools_image: str,
    mapping: Mapping[str, str],
    image_users: Mapping[str, str] | None = None,
) -> str:
    """Map base images, then append the runtime block to the final stage.

    `image_users` gives the default USER of external base images (from `docker inspect`), so
    a stage that inherits a non-root user still installs as root and gets its user back.
    """
    mapped = map_base_images(text, mapping)
    if not mapped.endswith("\n"):
        mapped += "\n"
    return mapped + runtime_block(tools_image, final_stage_user(mapped, image_users))
