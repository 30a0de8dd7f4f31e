"""Valid JSON text from any value: the one encoder every JSON writer of katra3d calls.

JSON has no NaN or infinity, yet Python's ``json`` writes them as ``NaN`` / ``Infinity``, which
strict parsers (browsers, ``jq``, most languages) refuse. A header can hold them (a trace written
by an older build or by hand, ``katra3d.capture(capture_options=...)``), and so can statistics.
:func:`dumps` writes every non-finite float as ``null``, and nothing else differently.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import IO, Any


def _null(_constant: str) -> None:
    return None


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, **kwargs)`` with every NaN, inf and -inf written as ``null`` (valid JSON).

    The common case (nothing non-finite) costs one ``json.dumps``; otherwise the text is parsed
    back with the non-finite constants as None and written again.
    """
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
    """:func:`dumps` written to ``fp``."""
    fp.write(dumps(obj, **kwargs))


def record_dict(record: Any) -> dict[str, Any]:
    """A dataclass record's fields as a JSON-ready dict, field by field: non-finite floats become
    None and tuples lists (the one rule of every record's ``as_dict``)."""
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
