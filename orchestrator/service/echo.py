"""What an error answer may echo of a request: a bounded amount, always strict JSON.

A 422 names what was wrong and shows the input it refused, which helps a client see its
mistake, but a body is up to 1 MiB: echoing it whole made a 100 KB field a 100 KB answer, and
10,000 bad list items 10,000 errors. So each echoed input is cut to `ECHO_CHARS` characters of
its JSON (with `input_note` saying it was cut, and from how long), each location part (a key
of the request's own) likewise, each message to `MSG_CHARS`, and at most `MAX_ECHOED_ERRORS`
errors are listed (`errors_note` says how many there were).

`validation_errors` builds a 422's errors, `shown` cuts one value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

ECHO_CHARS = 256
MAX_ECHOED_ERRORS = 20
MSG_CHARS = 1024  # a message a validator wrote may quote the value it refused


def json_safe(value: Any) -> Any:
    """An error's echoed input as strict JSON: a non-finite float as its name ("NaN"), so
    the 422 itself can be encoded (it was a 500)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def shown(text: str, cap: int = ECHO_CHARS) -> str:
    """`text` as an error message may quote it: at most `cap` characters, marked when cut."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}… [cut: {len(text)} characters]"


def _echoed_input(value: Any) -> dict[str, Any]:
    safe = json_safe(value)
    try:
        text = json.dumps(safe, ensure_ascii=False, default=repr)
    except ValueError:  # a cycle, say: nothing a JSON body can hold, so shown by its repr
        text = repr(safe)
    if len(text) <= ECHO_CHARS:
        return {"input": safe}
    return {
        "input": text[:ECHO_CHARS] + "…",
        "input_note": f"cut: the input is {len(text)} characters as JSON; the first "
        f"{ECHO_CHARS} are shown",
    }


def _echoed_loc(loc: Sequence[Any]) -> list[Any]:
    return [shown(part) if isinstance(part, str) else part for part in loc]


def validation_errors(errors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A 422's body for pydantic's `errors`: each one's type, loc, msg and input, bounded
    (its `ctx` is left out: it may hold the input again, and values JSON cannot encode)."""
    shown_errors = [
        {
            **{k: v for k, v in e.items() if k not in ("ctx", "input", "loc", "msg")},
            "loc": _echoed_loc(e.get("loc", ())),
            "msg": shown(str(e.get("msg", "")), MSG_CHARS),
            **_echoed_input(e.get("input")),
        }
        for e in errors[:MAX_ECHOED_ERRORS]
    ]
    body: dict[str, Any] = {"detail": shown_errors}
    if len(errors) > MAX_ECHOED_ERRORS:
        body["errors_note"] = f"{len(errors)} errors; the first {MAX_ECHOED_ERRORS} are listed"
    return body
