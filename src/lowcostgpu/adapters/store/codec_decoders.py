"""The decoders of the store's JSON codec: each type hint compiled once into a closure.

`codec.decode` and `codec.loads` are the way in (`codec`'s docstring says what is decoded, how
strictly, and why it is compiled); here is how a type becomes a decoder (`decoder`, cached per
hint) and how a failure finds its path (`InvalidValue`, which `codec.decode` renders). The encoders
stay in `codec`: the two halves share only `as_is`. Kept apart so that each module is one half
of the codec and fits the house size; `codec` imports these three names, and nothing else
does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from lowcostgpu.domain.errors import LowcostgpuError

Decoder = Callable[[Any], Any]
_MISSING: Any = object()


# --- failures -----------------------------------------------------------------------------------


class InvalidValue(Exception):
    """A value that does not decode, somewhere below a path not known yet.

    `render(path)` is the message, given the path of the value where it was raised; `within`
    moves it one segment down as it passes up through the enclosing field, item or entry.
    """

    def __init__(self, render: Callable[[str], str], hint: str | None = None) -> None:
        self.render = render
        self.hint = hint

    def within(self, segment: str) -> InvalidValue:
        inner = self.render
        self.render = lambda path: inner(path + segment)
        return self


def _expected(expected: str, raw: Any) -> InvalidValue:
    shown = repr(raw) if len(repr(raw)) <= 80 else repr(raw)[:77] + "..."
    return InvalidValue(lambda path: f"{path}: expected {expected}, found {shown} in the store")


def _said(message: str, hint: str | None = None) -> InvalidValue:
    """A failure whose message is `message` after the path."""
    return InvalidValue(lambda path: path + message, hint)


# --- decoders -----------------------------------------------------------------------------------


def decoder(tp: Any) -> Decoder:
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
        return as_is
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


def as_is(raw: Any) -> Any:
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
    candidates = [decoder(a) for a in args if a is not type(None)]
    if nullable and len(candidates) == 1:
        return _optional_decoder(args[0] if args[0] is not type(None) else args[1])

    def union(raw: Any) -> Any:
        if raw is None and nullable:
            return None
        errors: list[Callable[[str], str]] = []
        for d in candidates:
            try:
                return d(raw)
            except InvalidValue as e:
                errors.append(e.render)
        if len(errors) == 1:
            raise InvalidValue(errors[0])
        raise InvalidValue(lambda path: f"{path}: {'; '.join(r(path) for r in errors)}")

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
    inner = decoder(tp)

    def optional(raw: Any) -> Any:
        if raw is None:
            return None
        try:
            return inner(raw)
        except InvalidValue as e:
            raise InvalidValue(e.render) from None

    return optional


def _collection_decoder(origin: type, args: tuple[Any, ...]) -> Decoder:
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return _fixed_tuple_decoder(args)
    item_tp = args[0] if args else Any
    item = decoder(item_tp)
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
        except InvalidValue as e:
            raise e.within(f"[{len(out)}]") from None
        return origin(out)

    return collection


def _fixed_tuple_decoder(args: tuple[Any, ...]) -> Decoder:
    items = [decoder(a) for a in args]
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
            except InvalidValue as e:
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
    value = decoder(value_tp)

    def mapping(raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise _expected("an object", raw)
        out = {}
        for k, v in raw.items():
            try:
                out[k] = value(v)
            except InvalidValue as e:
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
                    decoder(hints[f.name]),
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
                kwargs[name] = v if d is as_is else d(v)
            except InvalidValue as e:
                raise e.within(f".{name}") from None
        try:
            return cls(**kwargs)
        except (LowcostgpuError, TypeError, ValueError) as e:
            raise _said(f": the stored {cls.__name__} is not valid: {e}") from None

    return dataclass


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)
