"""Valid JSON text from any value: the one encoder every JSON writer calls.

Python's ``json`` writes NaN and infinity, which strict parsers refuse; headers and statistics can
hold them, so :func:`dumps` writes them as ``null``."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import IO, Any


def _null(_constant: str) -> None:
    return None


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` with every non-finite float as ``null``; only a text that has one is parsed
    back and written again."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        pass
    plain = {
        k: v for k, v in kwargs.items() if k in ("default", "cls", "ensure_ascii", "check_circular")
    }
    text = json.dumps(obj, allow_nan=True, **plain)
    return json.dumps(json.loads(text, parse_constant=_null), allow_nan=False, **kwargs)


def dump(obj: Any, fp: IO[str], **kwargs: Any) -> None:
    fp.write(dumps(obj, **kwargs))


def record_dict(record: Any) -> dict[str, Any]:
    """A dataclass record's fields as a JSON-ready dict (non-finite floats None, tuples lists):
    every record's ``as_dict``."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


__all__ = ["dump", "dumps", "record_dict"]
