"""An agent's request body read as strict JSON: NaN, Infinity and numbers past a float's range
(1e999) are refused, naming where they are.

Python's `json.loads` takes NaN and Infinity as numbers and 1e999 as inf; forwarded, they
reach the upstream as bare `NaN` (which strict servers refuse, so the agent sees the
upstream's error for a body the gateway let through) or, re-encoded elsewhere, as null (the
server's default, silently). The check costs nothing on ordinary bodies: the walk that finds
the field runs only when the parser has seen such a number.

`loads_strict` is the reader; `NonFiniteNumber` names the field.
"""

from __future__ import annotations

import json
import math
from typing import Any


class NonFiniteNumber(ValueError):
    """A body holds a number JSON cannot carry; `path` says where (`temperature`,
    `messages[2].content`)."""

    def __init__(self, path: str, value: str) -> None:
        where = path or "the body"
        super().__init__(
            f"{where}: {value} is not a JSON number (NaN, Infinity and numbers beyond a "
            "double's range are refused); give a finite number"
        )
        self.path = path


def loads_strict(raw: bytes | str) -> Any:
    """`json.loads`, refusing non-finite numbers with `NonFiniteNumber` (a ValueError)."""
    seen: list[str] = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity
        seen.append(name)
        return float(name)

    def number(text: str) -> float:
        value = float(text)
        if math.isinf(value):
            seen.append(text)
        return value

    value = json.loads(raw, parse_constant=constant, parse_float=number)
    if seen:
        raise NonFiniteNumber(_first_non_finite(value) or "", seen[0])
    return value


def _first_non_finite(value: Any) -> str | None:
    """The path of the first non-finite float in a parsed body, depth first and in order;
    iterative, since a body may nest deeper than Python's recursion limit allows a walk."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path
        if isinstance(item, dict):
            children = [(f"{path}.{k}" if path else str(k), v) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(f"{path}[{i}]", v) for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))
    return None
