"""Instance tokens: each run of a workload gets a token that opens its own metadata, nothing else.

A token is `KID.INSTANCE.ALLOCATION.MAC` (the ids base64url-encoded): an HMAC-SHA256 of the
instance id and the run's allocation id under the key `KID` of the server's keyring. It is checked
without being stored and survives restarts (the keyring lives in the data directory), and:

- it is bound to one run: the API accepts it only while that allocation is the instance's current
  one (`api.context`), so the token of an earlier run — read from an old log, say — opens nothing
  once the instance has been restarted, stopped or has finished;
- keys rotate: each server start mints with a fresh key, and an older key is kept only while a run
  minted with it may still be live (`bootstrap.token_keys`), so a key that leaks stops opening
  anything once the runs of its time are over.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from lowcostgpu.domain.errors import Unauthenticated

MIN_KEY_BYTES = 16
_HINT = "use the LOWCOSTGPU_TOKEN given to this run of the workload in its environment"


@dataclass(frozen=True, slots=True)
class TokenClaim:
    """What a valid token says: this instance, this run."""

    instance_id: str
    allocation_id: str


class Tokens:
    """Mints with `current`; verifies with any key of `keys` (the current one included)."""

    def __init__(self, secret: bytes, *, kid: str = "k0", older: Mapping[str, bytes] | None = None):
        keys = {**(older or {}), kid: secret}
        if any(len(k) < MIN_KEY_BYTES for k in keys.values()):
            raise ValueError(f"token keys must be at least {MIN_KEY_BYTES} bytes")
        self._kid, self._keys = kid, keys

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def mint(self, instance_id: str, allocation_id: str) -> str:
        parts = (self._kid, _b64(instance_id), _b64(allocation_id))
        return ".".join((*parts, self._mac(self._keys[self._kid], instance_id, allocation_id)))

    def verify(self, token: str) -> TokenClaim:
        """Whose run the token belongs to, or `Unauthenticated` (forged, mangled, retired key)."""
        parts = token.split(".")
        key = self._keys.get(parts[0]) if len(parts) == 4 else None
        try:
            instance_id, allocation_id = _unb64(parts[1]), _unb64(parts[2])
        except (IndexError, ValueError):
            key = None
        if key is None or not hmac.compare_digest(
            parts[3], self._mac(key, instance_id, allocation_id)
        ):
            raise Unauthenticated("invalid instance token", hint=_HINT)
        return TokenClaim(instance_id, allocation_id)

    @staticmethod
    def _mac(key: bytes, instance_id: str, allocation_id: str) -> str:
        message = f"{instance_id}\n{allocation_id}".encode()
        return hmac.new(key, message, hashlib.sha256).hexdigest()[:32]


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(text: str) -> str:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError("not base64url") from exc
