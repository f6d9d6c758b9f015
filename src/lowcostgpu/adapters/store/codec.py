"""A JSON codec for the frozen dataclasses the store keeps (InstanceState, LaunchRecord, ...).

Driven by the dataclasses' own type hints, so a field added to `InstanceState` is stored without
touching this module. It round-trips exactly: enums by value, `PoolKey` and `Run` as objects,
tuples as lists, frozensets as sorted lists, mappings as objects. Decoding is strict, because a
silently dropped field of a lifecycle state is a lost decision: an unknown field or a value of the
wrong type raises `StoreDataError` naming the field. A field missing from the stored object takes
its default when it has one (rows written before the field existed), else it is an error too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from lowcostgpu.adapters.store.errors import StoreDataError
from lowcostgpu.domain.errors import LowcostgpuError

T = TypeVar("T")


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
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, frozenset | set):
        return sorted((encode(v) for v in value), key=_sort_key)
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {_key(k): encode(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise StoreDataError(f"cannot store a value of type {type(value).__name__}: {value!r}")


def decode(tp: Any, raw: Any, path: str) -> Any:
    """`raw` (parsed JSON) as a value of type `tp`; `path` names the field in errors."""
    if tp is Any:
        return raw
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _decode_union(typing.get_args(tp), raw, path)
    if origin is typing.Literal:
        if raw not in typing.get_args(tp):
            _fail(path, f"one of {list(typing.get_args(tp))}", raw)
        return raw
    if origin in (tuple, frozenset, list):
        return _decode_collection(tp, origin, raw, path)
    if origin is not None and issubclass(origin, Mapping):
        return _decode_mapping(tp, raw, path)
    if isinstance(tp, type):
        return _decode_plain(tp, raw, path)
    raise StoreDataError(f"{path}: the store cannot decode values of type {tp!r}")


def _decode_plain(tp: type, raw: Any, path: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, raw, path)
    if issubclass(tp, enum.Enum):
        try:
            return tp(raw)
        except ValueError:
            _fail(path, f"one of {[m.value for m in tp]}", raw)
    if tp is type(None):
        if raw is not None:
            _fail(path, "null", raw)
        return None
    if tp is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if tp in (bool, int, float, str) and type(raw) is tp:
        return raw
    _fail(path, tp.__name__, raw)


def _decode_dataclass(cls: type, raw: Any, path: str) -> Any:
    if not isinstance(raw, dict):
        _fail(path, f"an object ({cls.__name__})", raw)
    hints = _hints(cls)
    unknown = sorted(set(raw) - set(hints))
    if unknown:
        raise StoreDataError(
            f"{path}: unknown field(s) {', '.join(unknown)} in a stored {cls.__name__}",
            hint="the row was written by a newer lowcostgpu; upgrade this one",
        )
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in raw:
            kwargs[f.name] = decode(hints[f.name], raw[f.name], f"{path}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise StoreDataError(f"{path}: field {f.name} is missing from a stored {cls.__name__}")
    try:
        return cls(**kwargs)
    except (LowcostgpuError, TypeError, ValueError) as e:
        raise StoreDataError(f"{path}: the stored {cls.__name__} is not valid: {e}") from None


def _decode_union(args: tuple[Any, ...], raw: Any, path: str) -> Any:
    if raw is None and type(None) in args:
        return None
    candidates = [a for a in args if a is not type(None)]
    errors: list[str] = []
    for a in candidates:
        try:
            return decode(a, raw, path)
        except StoreDataError as e:
            errors.append(e.message)
    raise StoreDataError(errors[0] if len(errors) == 1 else f"{path}: {'; '.join(errors)}")


def _decode_collection(tp: Any, origin: type, raw: Any, path: str) -> Any:
    if not isinstance(raw, list):
        _fail(path, "a list", raw)
    args = typing.get_args(tp)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != len(raw):
            _fail(path, f"a list of {len(args)} items", raw)
        return tuple(
            decode(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, raw, strict=True))
        )
    item = args[0] if args else Any
    items = [decode(item, v, f"{path}[{i}]") for i, v in enumerate(raw)]
    return origin(items)


def _decode_mapping(tp: Any, raw: Any, path: str) -> Any:
    if not isinstance(raw, dict):
        _fail(path, "an object", raw)
    args = typing.get_args(tp)
    value_tp = args[1] if len(args) == 2 else Any
    return {k: decode(value_tp, v, f"{path}.{k}") for k, v in raw.items()}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _key(k: Any) -> str:
    if isinstance(k, enum.Enum):
        return str(k.value)
    if isinstance(k, str):
        return k
    raise StoreDataError(f"cannot store a mapping with a non-text key: {k!r}")


def _sort_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _fail(path: str, expected: str, raw: Any) -> typing.NoReturn:
    shown = repr(raw) if len(repr(raw)) <= 80 else repr(raw)[:77] + "..."
    raise StoreDataError(f"{path}: expected {expected}, found {shown} in the store")
