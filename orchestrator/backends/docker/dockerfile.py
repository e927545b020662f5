"""The Dockerfile patch that bakes trialbox's venv into a task image, and base-image mapping.

Pure text in, text out: the same Dockerfile, tools image and mapping always give the same
bytes, so identical tasks hash to one tag and share one build.

`runtime_block` is the general runtime layer (the venv built in the image from the tools image);
`map_base_images` swaps FROM images by the base-image map; `patch_dockerfile` does both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from container_runtime import MIN_PYTHON
from container_runtime.paths import RUNTIME_PYTHON, VENV_DIR
from orchestrator.tasks.base_images import AS_ALIAS as _AS
from orchestrator.tasks.base_images import FROM_LINE as _FROM
from orchestrator.tasks.base_images import logical_lines as _logical_lines

UV_PATH = "/opt/trialbox/uv"

_USER = re.compile(r"^\s*USER\s+(?P<user>\S+)", re.IGNORECASE)


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


_INSTRUCTION = re.compile(r"^\s*(?P<word>[A-Za-z]+)(?P<args>.*)$")
_FROM_FLAG = re.compile(r"(?:^|\s)--from=", re.IGNORECASE)


@dataclass(frozen=True)
class _Stage:
    image: str  # what its FROM names: an external image or an earlier stage's alias
    alias: str | None
    user: str | None  # its last USER
    may_add_python: bool  # a step that could install a python3 (RUN, ADD, COPY --from)


def _may_add_python(line: str) -> bool:
    match = _INSTRUCTION.match(line)
    if match is None:
        return False
    word = match["word"].upper()
    return word in {"RUN", "ADD"} or (word == "COPY" and bool(_FROM_FLAG.search(match["args"])))


def _stages(text: str) -> list[_Stage]:
    """Every stage, in order."""
    stages: list[_Stage] = []
    for line in _logical_lines(text):
        if match := _FROM.match(line):
            alias = _AS.match(match["rest"])
            stages.append(_Stage(match["image"], alias["alias"].lower() if alias else None,
                                 None, False))  # fmt: skip
        elif stages and (user := _USER.match(line)):
            stages[-1] = replace(stages[-1], user=user["user"])
        elif stages and _may_add_python(line):
            stages[-1] = replace(stages[-1], may_add_python=True)
    return stages


def _chain(text: str) -> tuple[list[_Stage], str | None]:
    """The final stage and the earlier stages it comes from (`FROM <alias>`), last first, and
    the external image at the root of that chain (None: no FROM at all)."""
    stages = _stages(text)
    by_alias = {stage.alias: i for i, stage in enumerate(stages) if stage.alias}
    chain: list[_Stage] = []
    index: int | None = len(stages) - 1 if stages else None
    while index is not None:
        stage = stages[index]
        chain.append(stage)
        parent = by_alias.get(stage.image.lower())
        if parent is None or parent >= index:
            return chain, stage.image
        index = parent
    return chain, None


def _resolve(text: str) -> tuple[str | None, str | None]:
    """(user, external image): the final stage's user, inherited through `FROM <stage>`, or,
    when no stage on the way sets one, the external image it comes from."""
    chain, image = _chain(text)
    for stage in chain:
        if stage.user is not None:
            return stage.user, None
    return None, image


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


def final_stage_base(text: str) -> str | None:
    """The external image the final stage comes from, whatever USER a stage sets."""
    return _chain(text)[1]


def final_stage_may_add_python(text: str) -> bool:
    """Whether a step of the final stage, or of a stage it comes from, could put a python3 in
    the image that its base image lacks: a RUN (`apt-get install python3`), an ADD (which
    unpacks archives), a COPY --from another stage or image. A plain COPY of context files,
    WORKDIR, ENV and the like cannot."""
    return any(stage.may_add_python for stage in _chain(text)[0])


def runtime_block(tools_image: str, restore_user: str | None) -> str:
    """The block appended to the final stage; needs no network at build time.

    It never fails the build: with no python3 on PATH, one older than MIN_PYTHON, or one the
    runtime cannot be installed for, it prints one line saying so and leaves the venv out
    (the image then has no RUNTIME_PYTHON; agents that need it are refused at start).
    """
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
        'RUN py="$(command -v python3 || true)"; \\',
        '    if [ -z "$py" ]; then \\',
        f'      echo "trialbox: no python3 on PATH; the runtime venv (CPython >= {need}) is'
        ' skipped"; \\',
        f'    elif ! "$py" -c "import sys; sys.exit(sys.version_info < {MIN_PYTHON})"; then \\',
        f'      echo "trialbox: $py ($("$py" --version 2>&1)) is not CPython >= {need}; the'
        ' runtime venv is skipped"; \\',
        f'    elif ! {{ UV_PYTHON_DOWNLOADS=never {UV_PATH} venv --quiet --python "$py"'
        f" {VENV_DIR} && \\",
        f"      UV_PYTHON_DOWNLOADS=never {UV_PATH} pip install --quiet --no-cache"
        f" --python {RUNTIME_PYTHON} --no-index --find-links /opt/trialbox/wheels"
        " trialbox-container-runtime; }; then \\",
        f"      rm -rf {VENV_DIR}; \\",
        '      echo "trialbox: the runtime venv could not be installed for $py; it is skipped"; \\',
        "    fi; \\",
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
