"""Instance tokens: bound to one instance and one run, under a key of the keyring."""

from __future__ import annotations

import pytest

from lowcostgpu.app.tokens import TokenClaim, Tokens
from lowcostgpu.domain.errors import Unauthenticated

KEY, OTHER_KEY = b"k" * 32, b"o" * 32
TOKENS = Tokens(KEY, kid="k2", older={"k1": OTHER_KEY})
GOOD = TOKENS.mint("i-a", "i-a@100")


def _swap(index: int, value: str) -> str:
    parts = GOOD.split(".")
    parts[index] = value
    return ".".join(parts)


def test_a_token_opens_its_instance_and_run() -> None:
    assert TOKENS.verify(GOOD) == TokenClaim("i-a", "i-a@100")


def test_a_token_minted_with_an_older_key_of_the_keyring_still_opens() -> None:
    older = Tokens(OTHER_KEY, kid="k1").mint("i-a", "i-a@100")
    assert TOKENS.verify(older) == TokenClaim("i-a", "i-a@100")


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(_swap(1, TOKENS.mint("i-b", "i-a@100").split(".")[1]), id="other-instance"),
        pytest.param(_swap(2, TOKENS.mint("i-a", "i-a@200").split(".")[2]), id="other-run"),
        pytest.param(_swap(0, "k9"), id="unknown-key"),
        pytest.param(_swap(0, "k1"), id="key-of-another-mac"),
        pytest.param(_swap(3, "0" * 32), id="forged-mac"),
        pytest.param(Tokens(b"x" * 32, kid="k2").mint("i-a", "i-a@100"), id="guessed-secret"),
        pytest.param(_swap(1, "!!"), id="not-base64"),
        pytest.param(GOOD + ".x", id="five-parts"),
        pytest.param("i-a." + GOOD.split(".")[3], id="old-format"),
        pytest.param("", id="empty"),
    ],
)
def test_a_forged_or_mangled_token_is_refused(token: str) -> None:
    with pytest.raises(Unauthenticated, match="invalid instance token"):
        TOKENS.verify(token)


@pytest.mark.parametrize(("length", "ok"), [(15, False), (16, True)])
def test_keys_shorter_than_16_bytes_are_refused(length: int, ok: bool) -> None:
    if ok:
        Tokens(b"s" * length)
    else:
        with pytest.raises(ValueError, match="at least 16 bytes"):
            Tokens(b"s" * length)
