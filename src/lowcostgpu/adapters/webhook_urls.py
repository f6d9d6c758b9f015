"""Which webhook URLs are accepted: checked once at creation, and again before every send.

A customer's URL is input like any other: one that cannot be sent to must be refused with a
reason when it is created, never fail later inside the sender (a 5,000-character host name used
to pass creation and then raise an IDNA `UnicodeError` that killed the delivery thread for every
account). URLs are parsed by httpx, the library that sends them, so what passes here is what it
will send to; on top of that: http(s) only, no user name or password, a port in 1–65535, a host
that is an IP address or a DNS name of at most 253 characters in labels of 1–63 letters, digits
and inner hyphens (international names as their IDNA `xn--` form), and no address outside the
public internet unless the operator allows it (`serve --allow-private-webhooks`), so a URL
cannot reach the control plane's own neighbourhood.
"""

from __future__ import annotations

import ipaddress
import re
import socket

import httpx

from lowcostgpu.domain.errors import InvalidRequest

MAX_URL_CHARS = 2048
MAX_HOST_CHARS = 253
MAX_LABEL_CHARS = 63
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_EXAMPLE = "e.g. https://example.com/hook"
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_url(url: str, *, allow_private: bool) -> None:
    """`InvalidRequest` naming what is wrong with `url`; returns when it may be sent to."""
    host, port = _parsed(url)
    address = _ip(host)
    if address is None:
        _check_name(host)
    if allow_private:
        return
    for found in [address] if address is not None else _resolved(host, port):
        if not _is_public(found):
            raise InvalidRequest(
                f"webhook URL {_shown(url)} resolves to {found}, a private/loopback address",
                hint="use a public URL (the operator may allow private ones: "
                "serve --allow-private-webhooks)",
            )


def _parsed(url: str) -> tuple[str, int]:
    """The ASCII host and the port of an http(s) URL without credentials."""
    if len(url) > MAX_URL_CHARS:
        raise InvalidRequest(
            f"webhook URL is {len(url)} characters long; at most {MAX_URL_CHARS} are accepted",
            hint="use a shorter URL",
        )
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidRequest(
            f"webhook URL {_shown(url)} contains whitespace or a control character",
            hint="percent-encode it (%20) or remove it",
        )
    try:
        parsed = httpx.URL(url)
        port = parsed.port
        host = parsed.raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise InvalidRequest(
            f"webhook URL {_shown(url)} is not a valid URL: {exc}", hint=_EXAMPLE
        ) from None
    if parsed.scheme not in ("http", "https") or not host:
        raise InvalidRequest(f"webhook URL {_shown(url)} is not an http(s) URL", hint=_EXAMPLE)
    if parsed.userinfo:
        raise InvalidRequest(
            f"webhook URL {_shown(url)} carries a user name or password",
            hint="remove it: deliveries are authenticated by their signature (webhook-signature)",
        )
    if port is not None and not 1 <= port <= 65535:
        raise InvalidRequest(
            f"webhook URL {_shown(url)} has port {port}; a port is 1 to 65535", hint=_EXAMPLE
        )
    default = 443 if parsed.scheme == "https" else 80
    return host, port or default


def _ip(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _check_name(host: str) -> None:
    name = host.removesuffix(".")  # a fully qualified name may end with a dot
    if len(name) > MAX_HOST_CHARS:
        raise InvalidRequest(
            f"webhook host name is {len(name)} characters long; at most {MAX_HOST_CHARS}",
            hint="use a shorter host name",
        )
    for label in name.split("."):
        if len(label) > MAX_LABEL_CHARS:
            raise InvalidRequest(
                f"webhook host name has a part of {len(label)} characters "
                f"({label[:20]}…); each part between dots is at most {MAX_LABEL_CHARS}",
                hint="use a valid host name",
            )
        if not _LABEL.fullmatch(label):
            raise InvalidRequest(
                f"webhook host name {_shown(host)} is not a valid host name: each part between "
                "dots is 1 to 63 letters, digits or inner hyphens",
                hint=_EXAMPLE,
            )


def _resolved(host: str, port: int) -> list[IpAddress]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidRequest(
            f"webhook host {_shown(host)} does not resolve: {why}", hint="use a public host name"
        ) from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _is_public(address: IpAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_global
    return address.is_global


def _shown(text: str, limit: int = 100) -> str:
    """A customer's text in a message: quoted, and cut short, so an error stays readable."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "…"
