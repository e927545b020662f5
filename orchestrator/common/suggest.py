""" "Did you mean …?": the known name a mistyped one is closest to, for errors a user can fix.

`closest` and `did_you_mean` use difflib's ratio with `CUTOFF` 0.75, for agent names, job-file
keys and task.toml keys alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# A name this close to a known one (difflib's ratio, 0..1) is taken for a misspelling of it:
# low enough for a swapped or dropped letter in a short name ("usre", "orcale"), high enough
# that a different word stays silent.
CUTOFF = 0.75


def closest(word: str, known: Iterable[str], *, cutoff: float = CUTOFF) -> str | None:
    """The known name `word` is probably a typo of, or None."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(word: str, known: Iterable[str], *, cutoff: float = CUTOFF) -> str:
    """`"; did you mean X?"` for a near miss, else `""`: to end an error message with."""
    guess = closest(word, known, cutoff=cutoff)
    return f"; did you mean {guess}?" if guess else ""
