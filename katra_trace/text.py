"""The one escaping rule: :func:`shown` keeps a message with any name on one line; stored text
fields pass :func:`check_text`; paths are never refused for their bytes."""

from __future__ import annotations

import os

from katra_trace.errors import ConfigError


def escape(text: str) -> str:
    """``text`` with non-printable characters backslash-escaped."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def shown(name: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """A name or path quoted and escaped as ``repr`` writes it."""
    text = os.fsdecode(name)
    return repr(text)


def check_text(value: str, option: str, *, max_chars: int | None = None) -> str:
    """``value``, or ConfigError for surrogates, control characters or over ``max_chars``."""

    bad = next((c for c in value if not c.isprintable() and c != " "), None)
    if bad is not None:
        what = "bytes that are not UTF-8" if 0xD800 <= ord(bad) <= 0xDFFF else "control characters"
        raise ConfigError(
            f"{option} {shown(value[:80])} holds {what} ({escape(bad)}); give plain text"
        )
    if max_chars is not None and len(value) > max_chars:
        raise ConfigError(f"{option} is {len(value)} characters long; at most {max_chars} are kept")
    return value


__all__ = ["check_text", "escape", "shown"]
