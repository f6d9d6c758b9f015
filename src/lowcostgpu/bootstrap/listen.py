"""Whether `serve` can listen where it was told, asked before any state is written."""

from __future__ import annotations

import socket

from lowcostgpu.domain.errors import ConfigError

MAX_PORT = 65535


def check_listen(host: str, port: int) -> None:
    """The address can be listened on — checked before any state is written, so a port in use
    or a host that is not here is one clear line, not uvicorn's exit after the store is made."""
    if isinstance(port, bool) or not 1 <= port <= MAX_PORT:
        raise ConfigError(
            f"port {port} is not a TCP port", hint=f"give --port a number from 1 to {MAX_PORT}"
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise ConfigError(
            f"cannot listen on {host}:{port}: {reason}",
            hint="choose another --port (or stop what listens there), or a --host of this machine",
        ) from None
