"""Secrets never land in results or logs: every collected file and message is scrubbed."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

REDACTED = "[redacted]"
_MIN_SECRET_LEN = 4  # shorter values would redact ordinary words


class Scrubber:
    """Replaces known secret values with a marker."""

    def __init__(self, secrets: Iterable[str]) -> None:
        values = {s for s in secrets if len(s) >= _MIN_SECRET_LEN}
        self._secrets = sorted(values, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        return value

    def file(self, path: Path) -> None:
        data = path.read_bytes()
        cleaned = data
        for secret in self._secrets:
            cleaned = cleaned.replace(secret.encode(), REDACTED.encode())
        if cleaned != data:
            path.write_bytes(cleaned)

    def tree(self, root: Path) -> None:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                self.file(path)
