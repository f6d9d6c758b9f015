"""The webhook sender: which URLs it accepts, and that no endpoint can make a send raise, hang
or fill memory — it always comes back as a result to record.

Servers here are real sockets on 127.0.0.1 (a hanging one, one that drips bytes, one that answers
a megabyte), so what is tested is what httpx and the watchdog do with them.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress

import pytest

from lowcostgpu.adapters.webhook_urls import MAX_HOST_CHARS, MAX_URL_CHARS, check_url
from lowcostgpu.adapters.webhooks import EXCERPT_BYTES, HttpWebhookSender
from lowcostgpu.domain.errors import InvalidRequest

LABEL_63 = "a" * 63
HOST_253 = ".".join([LABEL_63] * 3 + ["a" * 61])  # 63·3 + 61 + 3 dots = 253
SECRET = "whsec_" + "A" * 32


def _long_url(chars: int) -> str:
    head = "https://example.com/"
    return head + "p" * (chars - len(head))


# (url, accepted?, words of the refusal) — with `allow_private`, so only the URL's form counts
FORMS = [
    ("https://example.com/hook", True, ""),
    ("http://example.com:1/hook", True, ""),
    ("http://example.com:65535/hook", True, ""),
    ("http://example.com:0/hook", False, "port 0"),
    ("http://example.com:65536/hook", False, "port 65536"),
    ("http://example.com:http/hook", False, "not a valid URL"),
    (_long_url(MAX_URL_CHARS), True, ""),
    (_long_url(MAX_URL_CHARS + 1), False, f"at most {MAX_URL_CHARS}"),
    (f"https://{HOST_253}/", True, ""),
    (f"https://{HOST_253}a/", False, f"at most {MAX_HOST_CHARS}"),
    (f"https://{HOST_253}./", True, ""),  # a fully qualified name's final dot
    (f"https://{LABEL_63}.com/", True, ""),
    (f"https://{LABEL_63}a.com/", False, "at most 63"),
    ("https://" + "a" * 5000 + ".com/", False, "characters long"),  # the hostname
    ("https://bücher.example/hook", True, ""),  # an international name (IDNA)
    ("https://a..b/", False, "not a valid host name"),
    ("https://-a.example/", False, "not a valid host name"),
    ("https://a-.example/", False, "not a valid host name"),
    ("https://exa_mple.com/", False, "not a valid host name"),
    ("https://user:pw@example.com/", False, "user name or password"),
    ("https://user@example.com/", False, "user name or password"),
    ("https://example.com/a b", False, "whitespace"),
    ("https://example.com/\x00", False, "control character"),
    ("https://exa\nmple.com/", False, "control character"),
    ("ftp://example.com/hook", False, "not an http(s) URL"),
    ("not-a-url", False, "not an http(s) URL"),
    ("https:///hook", False, "not an http(s) URL"),
    ("http://[::1]:8080/hook", True, ""),
    ("http://[not-ip]/hook", False, "not a valid URL"),
]


@pytest.mark.parametrize(("url", "accepted", "words"), FORMS, ids=[f[0][:40] for f in FORMS])
def test_a_webhook_url_is_accepted_only_in_a_form_that_can_be_sent_to(
    url: str, accepted: bool, words: str
) -> None:
    if accepted:
        check_url(url, allow_private=True)
        return
    with pytest.raises(InvalidRequest, match=re.escape(words)) as refused:
        check_url(url, allow_private=True)
    assert len(str(refused.value)) < 400  # the customer's long URL is not echoed whole


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",  # loopback in IPv6 clothing
        "http://0.0.0.0/hook",
        "http://2130706433/hook",  # 127.0.0.1 written as one number: resolved, then refused
    ],
)
def test_a_private_address_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(InvalidRequest, match="private/loopback"):
        check_url(url, allow_private=False)
    check_url(url, allow_private=True)


@pytest.fixture
def endpoint() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """A raw TCP endpoint on 127.0.0.1 that treats each connection with `handle`."""
    stop = threading.Event()
    listeners: list[socket.socket] = []

    def serve(handle: Callable[[socket.socket], None]) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.2)
        listeners.append(listener)

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}/hook"

    yield serve
    stop.set()
    for listener in listeners:
        listener.close()


def _hang(conn: socket.socket) -> None:
    conn.recv(65536)
    threading.Event().wait(60)  # never answers (the test ends first)


def _drip(conn: socket.socket) -> None:
    """Answers one header byte at a time, forever: each read is quick, the whole never ends."""
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    stop = threading.Event()
    while not stop.wait(0.1):
        try:
            conn.sendall(b"x")
        except OSError:
            return


def _huge(conn: socket.socket) -> None:
    conn.recv(65536)
    body = b"y" * (8 * 2**20)
    head = f"HTTP/1.1 500 Oops\r\ncontent-length: {len(body)}\r\n\r\n".encode()
    with suppress(OSError):  # the sender stopped reading: as it should
        conn.sendall(head + body)


@pytest.mark.parametrize(
    ("handle", "words"),
    [(_hang, "timed out after 1 s"), (_drip, "timed out after 1 s")],
    ids=["hangs", "drips-bytes-forever"],
)
def test_a_slow_endpoint_ends_in_a_timeout_result(
    endpoint: Callable[[Callable[[socket.socket], None]], str],
    handle: Callable[[socket.socket], None],
    words: str,
) -> None:
    sender = HttpWebhookSender(allow_private=True, timeout_s=1)
    result = sender.send(endpoint(handle), SECRET, "msg_1", 1_700_000_000, "{}")
    assert (result.status_code, result.ok) == (None, False)
    assert words in result.error


def test_a_huge_answer_is_read_only_as_far_as_its_excerpt(
    endpoint: Callable[[Callable[[socket.socket], None]], str],
) -> None:
    sender = HttpWebhookSender(allow_private=True, timeout_s=5)
    result = sender.send(endpoint(_huge), SECRET, "msg_1", 1_700_000_000, "{}")
    assert result.status_code == 500
    assert result.response_excerpt == "y" * EXCERPT_BYTES


@pytest.mark.parametrize(
    "url",
    ["https://" + "a" * 5000 + ".com/", "http://127.0.0.1:1/refused", "https://exa_mple.com/"],
    ids=["5000-char-host", "connection-refused", "bad-host-stored-before-the-checks"],
)
def test_a_send_to_an_unusable_url_returns_an_error_and_never_raises(url: str) -> None:
    result = HttpWebhookSender(allow_private=True, timeout_s=2).send(
        url, SECRET, "msg_1", 1_700_000_000, "{}"
    )
    assert result.status_code is None and result.error
