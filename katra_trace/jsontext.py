"""The one JSON encoder: writes NaN and infinity as ``null``, which strict parsers accept."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import IO, Any, TypeAlias

#: A value JSON holds; read-only containers, so ``list[int]`` and ``dict[str, float]`` are too.
JsonValue: TypeAlias = (
    None | bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
)
#: A JSON object being built or written: what an ``as_dict`` returns.
JsonObject: TypeAlias = dict[str, JsonValue]


def _null(_constant: str) -> None:
    return None


def dumps(obj: object, **kwargs: Any) -> str:
    """``json.dumps`` with non-finite floats as ``null``."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        pass
    plain = {
        k: v for k, v in kwargs.items() if k in ("default", "cls", "ensure_ascii", "check_circular")
    }
    text = json.dumps(obj, allow_nan=True, **plain)
    return json.dumps(json.loads(text, parse_constant=_null), allow_nan=False, **kwargs)


def dump(obj: object, fp: IO[str], **kwargs: Any) -> None:
    fp.write(dumps(obj, **kwargs))


def record_dict(record: Any) -> JsonObject:
    """A dataclass's fields as a JSON-ready dict: every record's ``as_dict``."""

    out: JsonObject = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


__all__ = ["JsonObject", "JsonValue", "dump", "dumps", "record_dict"]
