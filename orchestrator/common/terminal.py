"""Terminal escape sequences out of text a tool printed for a terminal (a build's colours, a
progress bar's cursor moves), so messages and logs read as plain text.

`plain` is the one function, used for a build's output in errors and `image-build.log`.
"""

from __future__ import annotations

import re

# ECMA-48: CSI (`ESC [ ... final`), OSC (`ESC ] ... BEL|ST`), then the other escapes
# (`ESC`, intermediates, a final byte: `ESC ( B` picks a character set, `ESC 7` saves the cursor).
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]")


def plain(text: str) -> str:
    """`text` without its terminal escape sequences."""
    return _ESCAPES.sub("", text)
