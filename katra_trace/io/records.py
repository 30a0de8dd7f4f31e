"""Typed records of JSON objects (pure): a wrong-typed value reads as None and is kept in
``extra``, so :meth:`_Record.as_dict` gives back what was read, in order."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from katra_trace.jsontext import JsonObject, JsonValue


class _Bad:
    """A value a converter refuses (kept in ``extra``)."""


_BAD = _Bad()
_Convert = Callable[[Any], Any]
_R = TypeVar("_R", bound="_Record")


# Converters: null stays None, a wrong type is _BAD.


def _scalar(*types: type) -> _Convert:
    """A converter of a JSON scalar (a bool is an int only where ``bool`` is named)."""

    def convert(v: Any) -> Any:
        ok = v is None or (isinstance(v, types) and (bool in types or not isinstance(v, bool)))
        return v if ok else _BAD

    return convert


_str, _int, _bool, _str_or_bool = _scalar(str), _scalar(int), _scalar(bool), _scalar(str, bool)


def _seconds(v: Any) -> Any:
    ok = (
        v is None
        or (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v))
    )
    return v if ok else _BAD


def _ints(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in v
    ):
        return tuple(v)
    return _BAD


def _strs(v: Any) -> Any:
    if v is None:
        return None
    return tuple(v) if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v) else _BAD


def _mapping(v: Any) -> Any:
    if v is None:
        return None
    return dict(v) if isinstance(v, Mapping) else _BAD


def _str_map(v: Any) -> Any:
    if v is None:
        return None
    ok = isinstance(v, Mapping) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    )
    return dict(v) if ok else _BAD


def _scenes(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and all(isinstance(e, Mapping) for e in v):
        return tuple(dict(e) for e in v)
    return _BAD


def _plain(v: Any) -> Any:
    if isinstance(v, _Record):
        return v.as_dict()
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, _Record) and not v.as_dict())


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Record:
    # keys not typed (unknown or wrong-typed), as read
    extra: Mapping[str, JsonValue] = dataclasses.field(default_factory=dict)
    # the keys as_dict writes (empty: the fields set)
    layout: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=False)

    _CONVERT: ClassVar[dict[str, _Convert]] = {}

    @classmethod
    def from_dict(cls: type[_R], data: object) -> _R:
        """The record of a JSON object (else an empty record)."""
        src: Mapping[Any, Any] = data if isinstance(data, Mapping) else {}
        kwargs: dict[str, object] = {}
        extra: JsonObject = {}
        for key, value in src.items():
            convert = cls._CONVERT.get(key) if isinstance(key, str) else None
            if convert is None:
                extra[key] = value
                continue
            typed = convert(value)
            if typed is _BAD:
                extra[key] = value
            else:
                kwargs[key] = typed
        return cls(**kwargs, extra=extra, layout=tuple(k for k in src if isinstance(k, str)))

    def replaced(self: _R, **fields: Any) -> _R:
        """A copy with ``fields`` set and gone from ``extra``."""
        extra = {k: v for k, v in self.extra.items() if k not in fields}
        base = self.layout or tuple(self.as_dict())
        layout = (*base, *(k for k in fields if k not in base))
        return dataclasses.replace(self, **fields, extra=extra, layout=layout)

    def as_dict(self) -> JsonObject:
        """A JSON-ready dict of what was read, or the fields set."""
        out: JsonObject = {}
        for f in dataclasses.fields(self):
            if not f.init or f.name in ("extra", "layout") or f.name in self.extra:
                continue
            value = getattr(self, f.name)
            if f.name in self.layout or not _empty(value):
                out[f.name] = _plain(value)
        for key, value in self.extra.items():
            out[key] = _plain(value)
        if self.layout:
            order = {k: i for i, k in enumerate(self.layout)}
            out = dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))
        return out


def _record(cls: type[_Record]) -> _Convert:
    def convert(v: Any) -> Any:
        return cls.from_dict(v) if isinstance(v, Mapping) else _BAD

    return convert


def _records(cls: type[_Record]) -> _Convert:

    def convert(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, (list, tuple)) and all(isinstance(e, Mapping) for e in v):
            return tuple(cls.from_dict(e) for e in v)
        return _BAD

    return convert
