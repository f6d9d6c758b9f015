"""A draft over a persistent map: reads fall through to the base, writes stay in a small dict.

The engine's state is kept in persistent maps (`immutables.Map`, a HAMT): a new version shares
all but O(log n) of the old one. One input of the engine (`core.work.Work`) changes a handful of
entries, so copying every map into a dict at its start would make each decision cost O(live
objects). A `Draft` is that copy made lazy: `draft[k]` reads the change if there is one, else the
base; `draft[k] = v` and `del draft[k]` only record the change; `finish()` folds the changes into
a new map in O(changes · log n). It is a full `MutableMapping` (iteration, `len`, `in`), because
the engine's code reads it as a dict; iterating it is O(n), as iterating a dict is.

`watch`, if given, is called after every write with the key and the new value (None when the key
was deleted): the engine keeps its indexes (deadlines, the nodes of each cluster) in line there,
in one place, whoever wrote the entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Final, TypeVar, cast

from immutables import Map

K = TypeVar("K")
V = TypeVar("V")


class _Gone:
    """The mark of a key deleted in the draft (None may be a value)."""

    __slots__ = ()


_GONE: Final = _Gone()
_MISSING: Final = object()
_NONE: Final[frozenset[Any]] = frozenset()


def as_map(m: Mapping[K, V]) -> Map[K, V]:
    """`m` as a persistent map: itself when it is one, else a copy (O(n), once)."""
    if isinstance(m, Map):
        return m
    return Map(m) if isinstance(m, dict) else Map(m.items())  # Map() reads only dicts as maps


class Draft(MutableMapping[K, V]):
    """Changes over a base `Map`. Reads and writes O(1) on top of the base's O(log n)."""

    __slots__ = ("_base", "_changes", "_size", "_watch")

    def __init__(
        self, base: Mapping[K, V], watch: Callable[[K, V | None], None] | None = None
    ) -> None:
        self._base: Map[K, V] = base if type(base) is Map else as_map(base)
        self._changes: dict[K, V | _Gone] = {}
        self._size = len(self._base)
        self._watch = watch

    @property
    def base(self) -> Map[K, V]:
        return self._base

    def __getitem__(self, key: K) -> V:
        found = self._changes.get(key, _MISSING)
        if found is _MISSING:
            return self._base[key]
        if isinstance(found, _Gone):
            raise KeyError(key)
        return cast(V, found)

    def __contains__(self, key: object) -> bool:
        changes: dict[object, object] = self._changes  # type: ignore[assignment]
        found = changes.get(key, _MISSING)
        if found is _MISSING:
            return key in self._base
        return not isinstance(found, _Gone)

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self:
            self._size += 1
        self._changes[key] = value
        if self._watch is not None:
            self._watch(key, value)

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self._size -= 1
        if key in self._base:
            self._changes[key] = _GONE
        else:
            del self._changes[key]
        if self._watch is not None:
            self._watch(key, None)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[K]:
        """The base's keys (its order) not deleted, then the keys new in the draft. O(n)."""
        changes = self._changes
        for key in self._base:
            if not isinstance(changes.get(key), _Gone):
                yield key
        for key, value in list(changes.items()):
            if not isinstance(value, _Gone) and key not in self._base:
                yield key

    @property
    def written(self) -> frozenset[K]:
        """Every key written or deleted, whether or not its value differs from the base."""
        return frozenset(self._changes)

    def changed(self) -> frozenset[K]:
        """The keys whose value differs from the base's: new, deleted or unequal. O(written);
        an identical object is not compared."""
        if not self._changes:
            return _NONE
        out = []
        for key, value in self._changes.items():
            old = self._base.get(key, _MISSING)
            if old is _MISSING:
                if not isinstance(value, _Gone):
                    out.append(key)
            elif isinstance(value, _Gone) or (old is not value and old != value):
                out.append(key)
        return frozenset(out)

    def finish(self) -> Map[K, V]:
        """The base with the changes: O(written · log n); the base itself when nothing was."""
        if not self._changes:
            return self._base
        m = self._base.mutate()
        for key, value in self._changes.items():
            if isinstance(value, _Gone):
                m.pop(key, None)
            else:
                m[key] = value
        return m.finish()
