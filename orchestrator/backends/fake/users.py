"""Who an exec runs as in a fake sandbox: a tiny passwd file.

The exec's `user` is resolved the way `docker exec -u` resolves it: a name from the image's
passwd, or a numeric `uid[:gid]`; `""` is the image's own `USER`. A name the passwd does not
hold is a `LookupError` carrying the engine's words (the exec then exits 126 with them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    """One user of the fake image."""

    name: str
    uid: int
    gid: int
    home: str

    @property
    def who(self) -> tuple[int, int]:
        return (self.uid, self.gid)


# What a Debian image has that trialbox's tests use: root, and nobody for "not root".
DEFAULT_USERS: tuple[Identity, ...] = (
    Identity("root", 0, 0, "/root"),
    Identity("nobody", 65534, 65534, "/nonexistent"),
)


def resolve(user: str, users: tuple[Identity, ...], default: str) -> Identity:
    """The identity `user` names; `""` means the image's default user."""
    wanted = user or default or "root"
    for known in users:
        if wanted == known.name:
            return known
    uid_text, _, gid_text = wanted.partition(":")
    if uid_text.isdigit() and (not gid_text or gid_text.isdigit()):
        uid = int(uid_text)
        for known in users:
            if uid == known.uid:
                gid = int(gid_text) if gid_text else known.gid
                return Identity(known.name, uid, gid, known.home)
        return Identity(uid_text, uid, int(gid_text) if gid_text else uid, "/")
    raise LookupError(f"unable to find user {wanted}: no matching entries in passwd file")
