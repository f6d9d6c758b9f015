"""The keyring instance tokens are signed with: `<data_dir>/token-keys.json`, mode 0600.

Each server start adds a fresh key and mints with it; the older keys stay only while a run minted
with them may still be live. A key current from `created_at` until its successor's `created_at`
can only have minted runs of instances enqueued before that successor was made (a run is minted
after its instance was enqueued), so it is dropped once no live instance that holds an allocation
was enqueued before then. A leaked key therefore stops opening anything once its runs are over.

The single `token-secret` of earlier versions is removed: its tokens were bound to no run.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lowcostgpu.app.tokens import Tokens
from lowcostgpu.core.instance_state import InstanceState

KEYRING_FILE = "token-keys.json"
LEGACY_SECRET_FILE = "token-secret"
_CLOCK_SLACK_S = 1  # timestamps are whole seconds; keep a key a second longer rather than less


def rotate(data_dir: Path, live: Iterable[InstanceState], now: float) -> Tokens:
    """Add a new key, drop those no live run can hold, write the keyring; the tokens it gives."""
    path = data_dir / KEYRING_FILE
    keys = _read(path)
    keys.append({"kid": _new_kid(keys), "secret": secrets.token_hex(32), "created_at": now})
    keys = _still_needed(keys, list(live))
    _write(path, keys)
    (data_dir / LEGACY_SECRET_FILE).unlink(missing_ok=True)
    current = keys[-1]
    older = {k["kid"]: bytes.fromhex(k["secret"]) for k in keys[:-1]}
    return Tokens(bytes.fromhex(current["secret"]), kid=current["kid"], older=older)


def _still_needed(keys: list[dict[str, Any]], live: list[InstanceState]) -> list[dict[str, Any]]:
    enqueued = [s.enqueued_at for s in live if s.allocation_id is not None]
    oldest = min((e if e is not None else float("-inf") for e in enqueued), default=None)
    kept = []
    for key, successor in itertools.pairwise(keys):
        if oldest is not None and oldest < float(successor["created_at"]) + _CLOCK_SLACK_S:
            kept.append(key)
    return [*kept, keys[-1]]


def _new_kid(keys: list[dict[str, Any]]) -> str:
    numbers = [int(k["kid"][1:]) for k in keys if str(k["kid"])[1:].isdigit()]
    return f"k{max(numbers, default=0) + 1}"


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    keys = data.get("keys", []) if isinstance(data, dict) else []
    return sorted(keys, key=lambda k: float(k["created_at"]))


def _write(path: Path, keys: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"keys": keys}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
