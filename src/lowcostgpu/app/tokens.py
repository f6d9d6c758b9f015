"""Instance tokens: each workload gets a token that opens its own metadata and nothing else.

A token is `INSTANCE_ID.MAC` with an HMAC-SHA256 of the id under the server's secret, so it is
checked without being stored, survives restarts (the secret lives in the data directory), and a
token of one instance never opens another's metadata.
"""

from __future__ import annotations

import hashlib
import hmac

from lowcostgpu.domain.errors import Unauthenticated


class Tokens:
    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the token secret must be at least 16 bytes")
        self._secret = secret

    def mint(self, instance_id: str) -> str:
        return f"{instance_id}.{self._mac(instance_id)}"

    def verify(self, token: str) -> str:
        """The instance id the token belongs to, or `Unauthenticated`."""
        instance_id, _, mac = token.rpartition(".")
        if not instance_id or not hmac.compare_digest(mac, self._mac(instance_id)):
            raise Unauthenticated(
                "invalid instance token",
                hint="use the LOWCOSTGPU_TOKEN given to the workload in its environment",
            )
        return instance_id

    def _mac(self, instance_id: str) -> str:
        return hmac.new(self._secret, instance_id.encode(), hashlib.sha256).hexdigest()[:32]
