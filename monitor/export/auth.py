"""Basic auth against the web configuration's bcrypt hashes, checked in constant time and
cached, so that a scrape pays bcrypt's cost (~60 ms at cost 10 here) once, not every time.

As in exporter-toolkit: an unknown user is checked against a fixed hash all the same (the
answer takes as long as for a known one), and the cache is keyed by a digest of user,
hash and password, so a changed hash or password is checked afresh and the cache holds
no password. Failures are not cached: a guess costs the guesser a bcrypt every time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

import bcrypt

__all__ = ["BasicAuth", "credentials"]

CACHE_MAX: Final = 256
# A hash no password is known to match (bcrypt of random bytes at cost 10): what an
# unknown user's password is checked against, so that it takes as long as a real check.
_DUMMY: Final = b"$2b$10$0P9td9IMlU2EBwXnnuG9Uew3256NHQwQSHyGW1UJxv6Oze31sBAxK"


def credentials(header: str | None) -> tuple[str, bytes] | None:
    """User and password of an `Authorization: Basic ...` header (None: absent, not
    Basic, or not decodable)."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user.decode("utf-8", "replace"), password


class BasicAuth:
    """Checks credentials against `users` (user -> bcrypt hash); thread-safe."""

    def __init__(self) -> None:
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, users: Mapping[str, bytes], user: str, password: bytes) -> bool:
        """Whether these credentials passed lately (no bcrypt: cheap enough for the loop)."""
        key = self.key(users, user, password)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True
        return False

    def check(self, users: Mapping[str, bytes], user: str, password: bytes) -> bool:
        """Whether `password` is `user`'s (bcrypt, ~60 ms: call it off the event loop)."""
        if self.cached(users, user, password):
            return True
        hashed = users.get(user)
        try:
            ok = bcrypt.checkpw(password, hashed or _DUMMY) and hashed is not None
        except ValueError:  # longer than bcrypt's 72 bytes, or a hash it cannot read
            ok = False
        if ok:
            with self._lock:
                self._cache[self.key(users, user, password)] = None
                while len(self._cache) > CACHE_MAX:
                    self._cache.popitem(last=False)
        return ok

    @staticmethod
    def key(users: Mapping[str, bytes], user: str, password: bytes) -> bytes:
        """What the cache knows these credentials by (no password in it)."""
        hashed = users.get(user, b"")
        return hashlib.sha256(b"\0".join((user.encode(), hashed, password))).digest()
