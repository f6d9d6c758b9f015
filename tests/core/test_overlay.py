"""The draft over a persistent map (`core.overlay`): it reads and iterates like the dict it stands
for, and `finish` gives the map that dict would be."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from immutables import Map

from lowcostgpu.core.overlay import Draft, as_map

Op = Callable[[Any], None]


def _set(key: str, value: int) -> Op:
    return lambda d: d.__setitem__(key, value)


def _del(key: str) -> Op:
    return lambda d: d.__delitem__(key)


BASE = {"a": 1, "b": 2}
CASES: list[tuple[str, list[Op], dict[str, int], set[str]]] = [
    # (what, operations, the dict after them, the keys `changed()` reports)
    ("nothing", [], {"a": 1, "b": 2}, set()),
    ("a new key", [_set("c", 3)], {"a": 1, "b": 2, "c": 3}, {"c"}),
    ("an overwrite", [_set("a", 9)], {"a": 9, "b": 2}, {"a"}),
    ("an equal overwrite", [_set("a", 1)], {"a": 1, "b": 2}, set()),
    ("a deletion", [_del("a")], {"b": 2}, {"a"}),
    ("delete then set again", [_del("a"), _set("a", 5)], {"a": 5, "b": 2}, {"a"}),
    ("delete then set back", [_del("a"), _set("a", 1)], {"a": 1, "b": 2}, set()),
    ("a new key deleted", [_set("c", 3), _del("c")], {"a": 1, "b": 2}, set()),
    ("everything deleted", [_del("a"), _del("b")], {}, {"a", "b"}),
]


@pytest.mark.parametrize(("what", "ops", "expected", "changed"), CASES, ids=[c[0] for c in CASES])
def test_a_draft_reads_like_the_dict_and_finishes_into_its_map(
    what: str, ops: list[Op], expected: dict[str, int], changed: set[str]
) -> None:
    base = Map(BASE)
    draft: Draft[str, int] = Draft(base)
    for op in ops:
        op(draft)
    assert dict(draft) == expected
    assert len(draft) == len(expected)
    assert sorted(draft) == sorted(expected)
    assert dict(draft.items()) == expected and sorted(draft.values()) == sorted(expected.values())
    for key in ("a", "b", "c"):
        assert (key in draft) == (key in expected)
        assert draft.get(key) == expected.get(key)
    assert draft == expected
    assert dict(draft.finish()) == expected
    assert draft.changed() == changed
    assert base == Map(BASE), "the base is never changed"


def test_a_draft_with_no_writes_finishes_into_its_own_base() -> None:
    base = Map(BASE)
    assert Draft(base).finish() is base


def test_a_missing_key_raises_as_a_dict_does() -> None:
    draft: Draft[str, int] = Draft(Map(BASE))
    del draft["a"]
    with pytest.raises(KeyError):
        draft["a"]
    with pytest.raises(KeyError):
        del draft["a"]
    assert draft.pop("a", None) is None


def test_iteration_keeps_the_base_order_then_the_new_keys_in_the_order_written() -> None:
    base = Map(BASE)
    draft: Draft[str, int] = Draft(base)
    draft["z"], draft["c"], draft["a"] = 26, 3, 0
    assert list(draft) == [*base, "z", "c"]


def test_the_watch_sees_every_write_and_deletion() -> None:
    seen: list[tuple[str, int | None]] = []
    draft: Draft[str, int] = Draft(Map(BASE), lambda k, v: seen.append((k, v)))
    draft["c"] = 3
    del draft["a"]
    draft.update({"b": 7})
    assert seen == [("c", 3), ("a", None), ("b", 7)]
    assert draft.written == frozenset({"a", "b", "c"})


@pytest.mark.parametrize("given_as", [dict, Map, lambda d: __import__("types").MappingProxyType(d)])
def test_any_mapping_becomes_a_map(given_as: Callable[[dict[str, int]], Any]) -> None:
    m = as_map(given_as(BASE))
    assert isinstance(m, Map) and dict(m) == BASE


_keys = st.sampled_from("abcdef")
_ops = st.lists(st.tuples(st.booleans(), _keys, st.integers(0, 3)), max_size=30)


@given(base=st.dictionaries(_keys, st.integers(0, 3)), ops=_ops)
def test_a_draft_behaves_as_a_dict_copy(base: dict[str, int], ops: list[Any]) -> None:
    model = dict(base)
    draft: Draft[str, int] = Draft(Map(base))
    for is_set, key, value in ops:
        if is_set:
            model[key] = value
            draft[key] = value
        elif key in model:
            del model[key]
            del draft[key]
    assert dict(draft) == model and len(draft) == len(model)
    assert dict(draft.finish()) == model
    assert draft.changed() == {k for k in base.keys() | model.keys() if base.get(k) != model.get(k)}
