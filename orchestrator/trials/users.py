"""The users a task names (`agent.user`, `verifier.user`, or the image's USER), checked in
the sandbox before the agent starts, while it is still as the image made it.

A user the image does not have is the task's fault (`validation`, no sample); asked only
later, after the agent, it would look like an agent that broke its sandbox, or an engine
that failed the exec.

`user_ids` checks them (and resolves the verifier's uid and gid), a missing one a `TaskError`.
"""

from __future__ import annotations

import re

from orchestrator.common.errors import TaskError
from orchestrator.sandbox import Sandbox
from relay.commands import UserIds

ROOT = (0, 0)
LOOKUP_SEC = 30.0
_NUMERIC = re.compile(r"(\d+)(?::(\d+))?")


def is_root(user: str) -> bool:
    return user in ("", "root", "0") or user.startswith(("root:", "0:"))


async def user_ids(sandbox: Sandbox, user: str, *, named_by: str) -> tuple[int, int]:
    """(uid, gid) of `user` in the sandbox ('' is root: the image sets no USER); TaskError
    naming `named_by` (e.g. "…/task.toml: verifier.user") when the image has no such user."""
    if is_root(user):
        return ROOT
    numeric = _NUMERIC.fullmatch(user)
    if numeric is not None:  # the engine runs a numeric uid with or without a passwd entry
        uid = int(numeric[1])
        return uid, int(numeric[2]) if numeric[2] is not None else uid
    ids = await sandbox.exec(UserIds(), timeout_sec=LOOKUP_SEC, user=user)
    found = UserIds.read(ids)
    if found is None:
        said = ids.output.strip()[:200] or f"exit code {ids.exit_code}"
        raise TaskError(
            f"{named_by} = {user!r}: the image has no such user ({said}); create it in "
            "environment/Dockerfile (useradd) or name one the image has"
        )
    return found
