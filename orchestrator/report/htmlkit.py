"""The few helpers every part of the page is written with: escaping and number formats.

All text reaches the page through `esc` (element text and attribute values alike), so a
log line or a trajectory message that holds HTML is shown as text, never parsed.
"""

from __future__ import annotations

import html
from datetime import datetime

PHASE_LABELS = {
    "waiting": "queued",
    "materialize": "materialize",
    "image": "image",
    "start": "start",
    "agent": "agent",
    "verify": "verify",
    "collect": "collect",
    "teardown": "teardown",
    "running": "running",
    "interrupted": "interrupted",
}


def esc(value: object) -> str:
    """Text for HTML: `<`, `>`, `&` and both quotes escaped, so it is safe in attributes too."""
    return html.escape(str(value), quote=True)


def secs(value: float | None) -> str:
    """A duration as people read it: 420 ms, 3.2 s, 45 s, 3 m 20 s, 1 h 05 m."""
    if value is None:
        return "–"
    if value < 0.001:
        return "0 s" if value <= 0 else "<1 ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 3600:
        return f"{int(value // 60)} m {int(value % 60):02d} s"
    return f"{int(value // 3600)} h {int(value % 3600 // 60):02d} m"


def num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def reward(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def clock(value: datetime | None) -> str:
    """UTC time of day; the full timestamp goes in a title."""
    return "–" if value is None else value.strftime("%H:%M:%S")


def stamp(value: datetime | None) -> str:
    return "–" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def share(part: float, whole: float) -> float:
    """`part` in percent of `whole`, clamped to 0..100."""
    return 0.0 if whole <= 0 else max(0.0, min(100.0, 100.0 * part / whole))


def pct(part: float, whole: float) -> str:
    """A CSS percentage, clamped to 0..100."""
    return f"{share(part, whole):.3f}%"
