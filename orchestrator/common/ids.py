"""The id grammar, in one place.

- A **rollout id** is the caller's: 1-128 letters, digits and `_ . : @ -` (a prefix such as
  `tenant-a::` lets one cancel select a whole tenant).
- A **trial id** names the trial's folder and its container, so it is stricter: 1-128
  letters, digits and `_ . -`, starting with a letter or digit.
- A rollout's trial id is derived from its rollout id, stably: a rollout id that is already a
  valid trial id is its own trial id; any other has every run of other characters turned
  into `-`, is cut to 60 characters, and gets `__` and the first 8 hex digits of the SHA-256
  of the full rollout id. The same rollout id always gives the same trial id (also for a
  rollout that never ran), and two rollout ids that clean up alike still get different ones.
- A trial started without a rollout (`run_trial`) gets its task's name and 8 random hex digits.
"""

from __future__ import annotations

import hashlib
import re
import uuid

ROLLOUT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
TRIAL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_TRIAL_ID = re.compile(TRIAL_ID_PATTERN)
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]+")
PREFIX_LEN = 60


def _clean(prefix: str, fallback: str) -> str:
    return _NOT_ALLOWED.sub("-", prefix).strip("-.")[:PREFIX_LEN].strip("-.") or fallback


def new_id(prefix: str) -> str:
    """A fresh, random id that is also a valid trial id and container name."""
    return f"{_clean(prefix, 'trial')}__{uuid.uuid4().hex[:8]}"


def trial_id_for(rollout_id: str) -> str:
    """The trial id of a rollout: stable, derived as the module's docstring says."""
    if _TRIAL_ID.fullmatch(rollout_id):
        return rollout_id
    digest = hashlib.sha256(rollout_id.encode()).hexdigest()[:8]
    return f"{_clean(rollout_id, 'rollout')}__{digest}"


def check_id(value: str, what: str) -> str:
    """`value` if it is a valid trial or job id, else a ValueError naming `what`."""
    if not _TRIAL_ID.fullmatch(value):
        raise ValueError(f"{what} {value!r}: use 1-128 letters, digits, '_', '.', '-'")
    return value
