"""A package's public names imported on first use (PEP 562), so importing the package costs
nothing its caller does not use: `import orchestrator` loads no engine SDK, HTTP stack or web
framework, and a light module below a package (`report/files.py`) does not drag in its
siblings.

    __getattr__, __dir__ = lazy_exports(__name__, {"Limits": "orchestrator.common.limits"})

Keep the same names in an `if TYPE_CHECKING:` import block beside it, for type checkers and
IDEs, and in `__all__`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`package`'s module `__getattr__` and `__dir__`: each name of `where` (name → the module
    defining it) imported from its module when first asked for, then kept on the package."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # asked once: later lookups skip this
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
