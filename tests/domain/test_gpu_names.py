"""GPU names as users type them: one resolver (`Catalog.resolve_gpu`) for launch and clusters."""

from __future__ import annotations

from importlib.resources import files

import pytest

from lowcostgpu.domain.catalog import parse_catalog
from lowcostgpu.domain.errors import InvalidRequest, NotFound

SHIPPED = parse_catalog(
    files("lowcostgpu.domain").joinpath("catalog.toml").read_text(encoding="utf-8")
)


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("a100-sxm4", "a100-sxm4"),  # the canonical name itself
        ("A100-SXM4", "a100-sxm4"),  # case-folded
        ("a100", "a100-sxm4"),  # a unique prefix (the short name)
        ("h100", "h100-sxm"),
        ("l40", "l40s"),
        ("L40S", "l40s"),
        ("a100sxm", "a100-sxm4"),  # separators ignored
        ("RTX_3090", "rtx-3090"),
        ("rtx 4090", "rtx-4090"),  # as the display name writes it
        ("5090", "rtx-5090"),  # a tail from a dash
        ("sxm4", "a100-sxm4"),
        (" a100 ", "a100-sxm4"),
    ],
)
def test_a_typed_name_resolves_to_the_canonical_gpu_type(typed: str, canonical: str) -> None:
    assert SHIPPED.resolve_gpu(typed).name == canonical


@pytest.mark.parametrize(
    ("typed", "matches"),
    [
        ("rtx", ["rtx-3090", "rtx-4090", "rtx-5090"]),
        ("sxm", ["a100-sxm4", "h100-sxm"]),
        ("RTX-", ["rtx-3090", "rtx-4090", "rtx-5090"]),
    ],
)
def test_an_ambiguous_name_is_refused_listing_every_match(typed: str, matches: list[str]) -> None:
    with pytest.raises(InvalidRequest) as info:
        SHIPPED.resolve_gpu(typed)
    assert f"{typed!r} is ambiguous: it matches {', '.join(matches)}" in info.value.message
    assert info.value.hint and "more of the name" in info.value.hint


@pytest.mark.parametrize(
    ("typed", "suggestion"),
    [
        ("a10-sxm4", "a100-sxm4"),
        ("a100-sxm5", "a100-sxm4"),
        ("h200", "h100-sxm"),
        ("h100-pcie", "h100-sxm"),
        ("l40x", "l40s"),
        ("rtx-5080", "rtx-5090"),
        ("tpu-v9", None),
        ("", None),
    ],
)
def test_an_unknown_name_suggests_the_closest_and_lists_the_known(
    typed: str, suggestion: str | None
) -> None:
    with pytest.raises(NotFound) as info:
        SHIPPED.resolve_gpu(typed)
    assert info.value.message == f"unknown GPU type {typed!r}"
    hint = info.value.hint or ""
    if suggestion is None:
        assert "did you mean" not in hint
    else:
        assert hint.startswith(f"did you mean {suggestion}? ")
    assert all(name in hint for name in SHIPPED.gpu_types) and "lowcostgpu prices" in hint


def test_a_stored_name_is_looked_up_exactly_not_resolved() -> None:
    """Rating and the API's views read stored names: `gpu` never guesses, so a prefix that
    slipped into a record is an error, not another type's price."""
    with pytest.raises(NotFound):
        SHIPPED.gpu("a100")
    assert SHIPPED.gpu("a100-sxm4") is SHIPPED.resolve_gpu("a100")
