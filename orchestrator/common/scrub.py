"""Secrets never land in results or logs: every collected file and message is scrubbed.

A credential is looked for as given and in the encodings an agent or a library most often
turns it into on its way to a log: base64 (standard and url-safe, with and without padding),
URL-encoding (`quote`, with and without "/" kept, and `quote_plus`; upper- and lower-case
hex) and JSON string escaping (ASCII-only and not, with and without "\\/"). Out of scope: a
value inside a larger encoded string, e.g. the base64 of `user:secret` in an HTTP Basic
header, where the value's bytes straddle base64's 3-byte groups; and encodings not listed
(hex, gzip, double encoding).

`Scrubber` replaces every form of every secret with `[redacted]` (`encodings` lists the forms);
`check_secret_lengths` refuses secrets too short to scrub safely when a config asks for it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
MIN_SCRUB_LEN = 4  # shorter values would redact ordinary words: they are not scrubbed at all
SAFE_SECRET_LEN = 8  # shorter values are refused under TrialConfig(refuse_short_secrets=True)

_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")


def check_secret_lengths(credentials: Mapping[str, str]) -> None:
    """Refuse credentials too short to scrub safely; the error names the variable."""
    for name, value in credentials.items():
        if len(value) < SAFE_SECRET_LEN:
            raise ValueError(
                f"credential {name}: its value has {len(value)} character(s), fewer than "
                f"{SAFE_SECRET_LEN}, too short to scrub from logs safely (refuse_short_secrets "
                "is set); use a longer value or unset refuse_short_secrets"
            )


def encodings(secret: str) -> set[str]:
    """`secret` and the encoded forms of it the scrubber also removes."""
    raw = secret.encode()
    forms = {secret}
    for b64 in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        forms |= {b64, b64.rstrip("=")}
    for url in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms |= {url, _PERCENT_HEX.sub(lambda m: m.group(0).lower(), url)}
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        forms |= {escaped, escaped.replace("/", "\\/")}
    return forms


class Scrubber:
    """Replaces known secret values, and their common encodings, with a marker."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SCRUB_LEN:
                forms |= encodings(secret)
        # Longest first: a form that contains another (padded base64 holds the unpadded one)
        # is replaced whole.
        self._secrets = sorted(forms, key=lambda s: (-len(s), s))
        self._secret_bytes = [s.encode() for s in self._secrets]

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        return value

    def data(self, value: bytes) -> bytes:
        marker = REDACTED.encode()
        for secret in self._secret_bytes:
            value = value.replace(secret, marker)
        return value

    def file(self, path: Path) -> None:
        data = path.read_bytes()
        cleaned = self.data(data)
        if cleaned != data:
            path.write_bytes(cleaned)

    def tree(self, root: Path) -> None:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                self.file(path)
