"""A JSON codec for the frozen dataclasses the store keeps (InstanceState, LaunchRecord, ...).

Driven by the dataclasses' own type hints, so a field added to `InstanceState` is stored without
touching this module. It round-trips exactly: enums by value, `PoolKey` and `Run` as objects,
tuples as lists, frozensets as sorted lists, mappings as objects. Decoding is strict, because a
silently dropped field of a lifecycle state is a lost decision: an unknown field or a value of the
wrong type raises `StoreDataError` naming the field. A field missing from the stored object takes
its default when it has one (rows written before the field existed), else it is an error too.

Speed. A server taking the lead decodes every live instance, and list endpoints decode a page of
rows on every request, so the type hints are read once per type, not once per value: `_decoder`
compiles a type into a closure (a dataclass's field names, decoders and required fields, an enum's
value → member table, ...), and `_encoder` does the same for the type of a value being encoded.
A decoder takes the raw value only. The path of a field in an error message ("InstanceState.runs
[0].started_at") is built only when decoding fails: a failure raises `_Invalid`, which each
enclosing field, item or entry prefixes with its segment on the way up, and `decode` renders it
against the path it was given. The messages are the ones the reflective decoder this replaced
wrote (tests/adapters/store/test_store_codec.py holds them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from json.encoder import encode_basestring_ascii
from typing import Any, TypeVar

from lowcostgpu.adapters.store.errors import StoreDataError
from lowcostgpu.domain.errors import LowcostgpuError

T = TypeVar("T")
Decoder = Callable[[Any], Any]
Encoder = Callable[[Any], Any]
_MISSING: Any = object()
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
        return _decoder(tp)(raw)
    except _Invalid as e:
        raise StoreDataError(e.render(path), hint=e.hint) from None


# --- failures -----------------------------------------------------------------------------------


class _Invalid(Exception):
    """A value that does not decode, somewhere below a path not known yet.

    `render(path)` is the message, given the path of the value where it was raised; `within`
    moves it one segment down as it passes up through the enclosing field, item or entry.
    """

    def __init__(self, render: Callable[[str], str], hint: str | None = None) -> None:
        self.render = render
        self.hint = hint

    def within(self, segment: str) -> _Invalid:
        inner = self.render
        self.render = lambda path: inner(path + segment)
        return self


def _expected(expected: str, raw: Any) -> _Invalid:
    shown = repr(raw) if len(repr(raw)) <= 80 else repr(raw)[:77] + "..."
    return _Invalid(lambda path: f"{path}: expected {expected}, found {shown} in the store")


def _said(message: str, hint: str | None = None) -> _Invalid:
    """A failure whose message is `message` after the path."""
    return _Invalid(lambda path: path + message, hint)


# --- decoders -----------------------------------------------------------------------------------


def _decoder(tp: Any) -> Decoder:
    """The decoder of values of type `tp`, compiled once.

    Cached on the hint's text too: typing compares unions and literals as sets (`int | str ==
    str | int`), but the order of their alternatives is the order they are tried in.
    """
    return _compiled(tp, repr(tp))


@cache
def _compiled(tp: Any, _text: str) -> Decoder:
    try:
        return _compile(tp)
    except Exception:  # a hint the checks below choke on: it fails as it did, when decoding
        return lambda raw: _compile(tp)(raw)


def _compile(tp: Any) -> Decoder:
    if tp is Any:
        return _as_is
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union_decoder(typing.get_args(tp))
    if origin is typing.Literal:
        return _literal_decoder(typing.get_args(tp))
    if origin in (tuple, frozenset, list):
        return _collection_decoder(origin, typing.get_args(tp))
    if origin is not None and issubclass(origin, Mapping):
        return _mapping_decoder(typing.get_args(tp))
    if isinstance(tp, type):
        return _plain_decoder(tp)
    message = f": the store cannot decode values of type {tp!r}"

    def undecodable(raw: Any) -> Any:
        raise _said(message)

    return undecodable


def _as_is(raw: Any) -> Any:
    return raw


def _plain_decoder(tp: type) -> Decoder:
    if dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if issubclass(tp, enum.Enum):
        return _enum_decoder(tp)
    if tp is type(None):
        return _none_decoder
    if tp is float:
        return _float_decoder
    if tp in (bool, int, str):
        return _exact_decoder(tp)
    name = tp.__name__

    def never(raw: Any) -> Any:
        raise _expected(name, raw)

    return never


def _exact_decoder(tp: type) -> Decoder:
    name = tp.__name__

    def exact(raw: Any) -> Any:
        if type(raw) is tp:
            return raw
        raise _expected(name, raw)

    return exact


def _float_decoder(raw: Any) -> Any:
    t = type(raw)
    if t is float:
        return raw
    if t is int or (isinstance(raw, int) and not isinstance(raw, bool)):
        return float(raw)
    raise _expected("float", raw)


def _none_decoder(raw: Any) -> Any:
    if raw is not None:
        raise _expected("null", raw)
    return None


def _enum_decoder(tp: type[enum.Enum]) -> Decoder:
    members: dict[Any, enum.Enum] = {}
    for m in tp:
        with contextlib.suppress(TypeError):  # an unhashable value: left to the enum
            members[m.value] = m

    def by_value(raw: Any) -> Any:
        try:
            return members[raw]
        except (KeyError, TypeError):
            pass
        try:  # what the table does not answer (an unhashable value, `_missing_`): the enum
            return tp(raw)
        except ValueError:
            raise _expected(f"one of {[m.value for m in tp]}", raw) from None

    return by_value


def _literal_decoder(values: tuple[Any, ...]) -> Decoder:
    expected = f"one of {list(values)}"

    def literal(raw: Any) -> Any:
        if raw not in values:
            raise _expected(expected, raw)
        return raw

    return literal


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    nullable = type(None) in args
    candidates = [_decoder(a) for a in args if a is not type(None)]
    if nullable and len(candidates) == 1:
        return _optional_decoder(args[0] if args[0] is not type(None) else args[1])

    def union(raw: Any) -> Any:
        if raw is None and nullable:
            return None
        errors: list[Callable[[str], str]] = []
        for d in candidates:
            try:
                return d(raw)
            except _Invalid as e:
                errors.append(e.render)
        if len(errors) == 1:
            raise _Invalid(errors[0])
        raise _Invalid(lambda path: f"{path}: {'; '.join(r(path) for r in errors)}")

    return union


def _optional_decoder(tp: Any) -> Decoder:
    """`tp | None`: a failure is the one of `tp`, less its hint (as any union's)."""
    if tp in (bool, int, str):
        name = tp.__name__

        def exact_or_none(raw: Any) -> Any:
            if raw is None or type(raw) is tp:
                return raw
            raise _expected(name, raw)

        return exact_or_none
    inner = _decoder(tp)

    def optional(raw: Any) -> Any:
        if raw is None:
            return None
        try:
            return inner(raw)
        except _Invalid as e:
            raise _Invalid(e.render) from None

    return optional


def _collection_decoder(origin: type, args: tuple[Any, ...]) -> Decoder:
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return _fixed_tuple_decoder(args)
    item_tp = args[0] if args else Any
    item = _decoder(item_tp)
    exact = item_tp if item_tp in (bool, int, str) else None

    def collection(raw: Any) -> Any:
        if not isinstance(raw, list):
            raise _expected("a list", raw)
        if exact is not None and all(type(v) is exact for v in raw):
            return origin(raw)
        out: list[Any] = []
        append = out.append
        try:
            for v in raw:
                append(item(v))
        except _Invalid as e:
            raise e.within(f"[{len(out)}]") from None
        return origin(out)

    return collection


def _fixed_tuple_decoder(args: tuple[Any, ...]) -> Decoder:
    items = [_decoder(a) for a in args]
    n = len(items)

    def fixed_tuple(raw: Any) -> Any:
        if not isinstance(raw, list):
            raise _expected("a list", raw)
        if len(raw) != n:
            raise _expected(f"a list of {n} items", raw)
        out = []
        for i, (d, v) in enumerate(zip(items, raw, strict=True)):
            try:
                out.append(d(v))
            except _Invalid as e:
                raise e.within(f"[{i}]") from None
        return tuple(out)

    return fixed_tuple


def _mapping_decoder(args: tuple[Any, ...]) -> Decoder:
    value_tp = args[1] if len(args) == 2 else Any
    if value_tp is Any:

        def any_mapping(raw: Any) -> Any:
            if not isinstance(raw, dict):
                raise _expected("an object", raw)
            return dict(raw) if type(raw) is dict else {k: v for k, v in raw.items()}

        return any_mapping
    value = _decoder(value_tp)

    def mapping(raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise _expected("an object", raw)
        out = {}
        for k, v in raw.items():
            try:
                out[k] = value(v)
            except _Invalid as e:
                raise e.within(f".{k}") from None
        return out

    return mapping


def _dataclass_decoder(cls: type) -> Decoder:
    """Checks the keys, decodes the fields in order, builds the instance.

    The plan (field decoders) is made on the first call, not here: a dataclass may hold itself,
    and a type hint that cannot be resolved fails where it always did, on decoding.
    """
    object_of = f"an object ({cls.__name__})"
    plan: tuple[tuple[str, Decoder, bool], ...] | None = None
    names: frozenset[str] = frozenset()

    def dataclass(raw: Any) -> Any:
        nonlocal plan, names
        if not isinstance(raw, dict):
            raise _expected(object_of, raw)
        if plan is None:
            hints = _hints(cls)
            names = frozenset(hints)
            plan = tuple(
                (
                    f.name,
                    _decoder(hints[f.name]),
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                )
                for f in dataclasses.fields(cls)
            )
        if len(raw) > len(names) or not names.issuperset(raw):
            unknown = sorted(set(raw) - names)
            if unknown:
                raise _said(
                    f": unknown field(s) {', '.join(unknown)} in a stored {cls.__name__}",
                    hint="the row was written by a newer lowcostgpu; upgrade this one",
                )
        get = raw.get
        kwargs: dict[str, Any] = {}
        for name, d, required in plan:
            v = get(name, _MISSING)
            if v is _MISSING:
                if required:
                    raise _said(f": field {name} is missing from a stored {cls.__name__}")
                continue
            try:
                kwargs[name] = v if d is _as_is else d(v)
            except _Invalid as e:
                raise e.within(f".{name}") from None
        try:
            return cls(**kwargs)
        except (LowcostgpuError, TypeError, ValueError) as e:
            raise _said(f": the stored {cls.__name__} is not valid: {e}") from None

    return dataclass


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


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
        return _as_is
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
