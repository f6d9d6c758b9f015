"""The volume grammar's new forms: a bare name attaches an existing volume, a size needs a unit."""

from __future__ import annotations

import pytest

from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.volumes import MAX_SIZE_GB, parse_size, parse_volume_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("ckpts", ("ckpts", None)), ("a-b_1", ("a-b_1", None)), ("ckpts:50GB", ("ckpts", 50))],
)
def test_a_bare_name_names_an_existing_volume_and_a_size_makes_one(
    spec: str, expected: tuple[str, int | None]
) -> None:
    parsed = parse_volume_spec(spec)
    assert (parsed.name, parsed.size_gb) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("100GB", 100), ("1gb", 1), (f"{MAX_SIZE_GB}GB", MAX_SIZE_GB)]
)
def test_a_size_is_read_with_its_unit(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("100", "has no unit"),
        ("100TB", "unit 'TB' is not known"),
        ("0GB", "1 to 100000 GB"),
        (f"{MAX_SIZE_GB + 1}GB", "1 to 100000 GB"),
        ("ten GB", "cannot read size"),
        (" 1GB", "cannot read size"),
        ("", "cannot read size"),
    ],
)
def test_a_size_without_a_known_unit_or_out_of_range_is_refused_with_an_example(
    text: str, words: str
) -> None:
    with pytest.raises(InvalidRequest, match=words) as refused:
        parse_size(text)
    assert refused.value.hint == "write a whole number of GB with its unit, e.g. 100GB"
