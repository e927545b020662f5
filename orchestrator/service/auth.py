"""Cancel authorization: the admin token and the tenants' tokens, who a caller is, and the
prefix a tenant's cancel is held within (the rules are in `server`'s module docstring).

Refusals are HTTP errors (401, 403) raised from here, answered by the app as any other.

`Tokens` holds the tokens (compared in constant time over SHA-256 digests); `scope_of` is the
prefix a caller's cancel is held within; `check_covers` refuses a tenant another's session.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import re
from collections.abc import Mapping
from typing import NamedTuple

from starlette.exceptions import HTTPException

from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.service.rollouts import CancelRequest


class Caller(NamedTuple):
    """Who sent a cancel: `open` (no token is configured), `admin`, or a tenant's prefix."""

    kind: str
    prefix: str | None = None


def _digest(token: str) -> bytes:
    # Fixed-length digests, so compare_digest does not even reveal a token's length.
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """The admin token and the tenants' tokens (prefix -> token), checked in constant time."""

    def __init__(self, admin: str | None, tenants: Mapping[str, str]) -> None:
        admin = admin.strip() if admin and admin.strip() else None
        seen: dict[str, str] = {}
        for prefix, token in tenants.items():
            if not re.fullmatch(ROLLOUT_ID_PATTERN, prefix):
                raise ValueError(f"tenant prefix {prefix!r} is not the start of a rollout id")
            token = token.strip()
            if not token:
                raise ValueError(f"tenant {prefix!r} has an empty token")
            if token == admin or token in seen:
                raise ValueError(f"tenant {prefix!r} shares its token with another holder")
            seen[token] = prefix
        self._admin = _digest(admin) if admin is not None else None
        prefixes = sorted(seen.values())
        for a, b in itertools.combinations(prefixes, 2):
            if b.startswith(a):  # sorted, so only the second can extend the first
                raise ValueError(
                    f"tenant prefixes {a!r} and {b!r} overlap: {a!r}'s token would reach "
                    f"{b!r}'s rollouts; give tenants prefixes that end in a separator ('a::')"
                )
        self._tenants = [(prefix, _digest(token)) for token, prefix in seen.items()]

    @property
    def guarded(self) -> bool:
        return self._admin is not None or bool(self._tenants)

    def caller(self, authorization: str | None, doing: str = "cancelling") -> Caller:
        """Who this is; raises 401 when tokens are configured and none of them was given
        (`doing`: what the refusal says needs the token)."""
        if not self.guarded:
            return Caller("open")
        scheme, _, given = (authorization or "").partition(" ")
        digest = _digest(given.strip())
        bearer = scheme.lower() == "bearer" and bool(given.strip())
        # Every configured token is compared, whichever matches, so timing tells nothing.
        is_admin = self._admin is not None and hmac.compare_digest(digest, self._admin)
        tenant = None
        for prefix, expected in self._tenants:
            if hmac.compare_digest(digest, expected):
                tenant = prefix
        if bearer and is_admin:
            return Caller("admin")
        if bearer and tenant is not None:
            return Caller("tenant", tenant)
        raise HTTPException(
            401,
            f"{doing} needs a bearer token on this server: the admin token, or a tenant's "
            "token for its own prefix",
            headers={"WWW-Authenticate": "Bearer"},
        )


def check_covers(caller: Caller, session_id: str) -> None:
    """A session call (exec, files, verify, close): a tenant's token covers only the sessions
    whose id starts with its prefix (403 for another's); admin and open callers reach all."""
    if caller.kind == "tenant" and not session_id.startswith(caller.prefix or ""):
        raise HTTPException(
            403, f"session {session_id!r} is outside {caller.prefix!r}, the prefix this token "
            "covers",
        )  # fmt: skip


def scope_of(caller: Caller, request: CancelRequest) -> str | None:
    """The prefix a tenant's cancel is held within; 403 for a selector outside it."""
    if caller.kind != "tenant":
        return None
    own = caller.prefix
    assert own is not None
    if request.all:
        raise HTTPException(
            403, f"cancelling all rollouts needs the admin token; this token covers {own!r} only"
        )
    if request.prefix is not None and not request.prefix.startswith(own):
        raise HTTPException(
            403, f"prefix {request.prefix!r} is outside {own!r}, the prefix this token covers"
        )
    outside = [i for i in request.ids or () if not i.startswith(own)]
    if outside:
        raise HTTPException(
            403, f"ids outside {own!r}, the prefix this token covers: {outside[:5]}; none was "
            "cancelled",
        )  # fmt: skip
    return own
