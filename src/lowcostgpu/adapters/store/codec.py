"""A JSON codec for the frozen dataclasses the store keeps (InstanceState, LaunchRecord, ...).

Driven by the dataclasses' own type hints, so a field added to `InstanceState` is stored without
touching this module. It round-trips exactly: enums by value, `PoolKey` and `Run` as objects,
tuples as lists, frozensets as sorted lists, mappings as objects. Decoding is strict, because a
silently dropped field of a lifecycle state is a lost decision: an unknown field or a value of the
wrong type raises `StoreDataError` naming the field. A field missing from the stored object takes
its default when it has one (rows written before the field existed), else it is an error too.

Speed. A server taking the lead decodes every live instance, and list endpoints decode a page of
rows on every request, so the type hints are read once per type, not once per value: `decoder`
compiles a type into a closure (a dataclass's field names, decoders and required fields, an enum's
value → member table, ...), and `_encoder` does the same for the type of a value being encoded.
A decoder takes the raw value only. The path of a field in an error message ("InstanceState.runs
[0].started_at") is built only when decoding fails: a failure raises `InvalidValue`, which each
enclosing field, item or entry prefixes with its segment on the way up, and `decode` renders it
against the path it was given. The messages are the ones the reflective decoder this replaced
wrote (tests/adapters/store/test_store_codec.py holds them).

The decoders are compiled in `codec_decoders`; this module is the way in (`dumps`, `loads`,
`encode`, `decode`) and holds the encoders.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any, TypeVar

from lowcostgpu.adapters.store.codec_decoders import InvalidValue, as_is, decoder
from lowcostgpu.adapters.store.errors import StoreDataError

T = TypeVar("T")
Encoder = Callable[[Any], Any]
_SCALARS = frozenset({str, int, bool, float, type(None)})  # encoded as they are


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON of a dataclass (or any value the codec encodes)."""
    return json.dumps(encode(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads(cls: type[T], text: str) -> T:
    try:
        raw = json.loads(text)
    except (TypeError, ValueError) as e:
        raise StoreDataError(f"stored {cls.__name__} is not valid JSON: {e}") from None
    return typing.cast(T, decode(cls, raw, cls.__name__))


def encode(value: Any) -> Any:
    t = type(value)
    return value if t in _SCALARS else (_ENCODERS.get(t) or _encoder(t))(value)


def decode(tp: Any, raw: Any, path: str) -> Any:
    """`raw` (parsed JSON) as a value of type `tp`; `path` names the field in errors."""
    try:
        return decoder(tp)(raw)
    except InvalidValue as e:
        raise StoreDataError(e.render(path), hint=e.hint) from None


# --- encoders -----------------------------------------------------------------------------------


_ENCODERS: dict[type, Encoder] = {}  # by the exact type of the value


def _encoder(t: type) -> Encoder:
    found = _ENCODERS.get(t)
    if found is None:
        found = _ENCODERS[t] = _encoder_of(t)
    return found


def _encoder_of(t: type) -> Encoder:
    """The encoder of values of exactly type `t`: the checks `encode` always made, in order."""
    if issubclass(t, enum.Enum):
        return _enum_value
    if not issubclass(t, type) and dataclasses.is_dataclass(t):
        return _dataclass_encoder(t)
    if issubclass(t, frozenset | set):
        return _set_encoder
    if issubclass(t, tuple | list):
        return _list_encoder
    if issubclass(t, Mapping):
        return _mapping_encoder
    if t is type(None) or issubclass(t, bool | int | float | str):
        return as_is
    return _unstorable


def _enum_value(value: Any) -> Any:
    return value.value


def _unstorable(value: Any) -> Any:
    raise StoreDataError(f"cannot store a value of type {type(value).__name__}: {value!r}")


def _dataclass_encoder(cls: type) -> Encoder:
    names = tuple(f.name for f in dataclasses.fields(cls))

    def dataclass(value: Any) -> Any:
        out = {}
        for name in names:
            v = getattr(value, name)
            t = type(v)
            out[name] = v if t in _SCALARS else (_ENCODERS.get(t) or _encoder(t))(v)
        return out

    return dataclass


def _set_encoder(value: Any) -> Any:
    items = [encode(v) for v in value]
    if all(type(v) is str for v in items):  # the key json.dumps(v, sort_keys=True) gives a str
        return sorted(items, key=encode_basestring_ascii)
    return sorted(items, key=_sort_key)


def _list_encoder(value: Any) -> Any:
    return [v if type(v) in _SCALARS else encode(v) for v in value]


def _mapping_encoder(value: Any) -> Any:
    return {
        k if type(k) is str else _key(k): v if type(v) in _SCALARS else encode(v)
        for k, v in value.items()
    }


def _key(k: Any) -> str:
    if isinstance(k, enum.Enum):
        return str(k.value)
    if isinstance(k, str):
        return k
    raise StoreDataError(f"cannot store a mapping with a non-text key: {k!r}")


def _sort_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)
