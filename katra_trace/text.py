"""Names and text fields as they reach a message, a terminal or a file: the one escaping rule.

A name (a path, a scene or zone name, a label) may hold anything a user or a file can put there: a
newline, an escape sequence, or bytes that are not UTF-8 (a file name such as ``$'\\xff.katra'``
arrives as the lone surrogate ``'\\udcff'``). In a message it is shown with :func:`shown` (quoted,
as ``repr`` does, so that a one-line error stays one line); any other text bound for a terminal goes
through :func:`escape`. A text field that is stored or rendered (``--title``, ``--label``) is
checked by :func:`check_text`: lone surrogates and control characters are refused with one message.
Paths themselves are never refused for their bytes: the operating system takes them back unchanged.
"""

from __future__ import annotations

import os

from katra_trace.errors import ConfigError


def escape(text: str) -> str:
    """``text`` with every character that is not printable (newlines, tabs, escape sequences, lone
    surrogates) written as its backslash escape (``\\n``, ``\\x1b``, ``\\udcff``); the rest
    unchanged."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def shown(name: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """A name or path for a one-line message: quoted, with :func:`escape`'s escapes (as ``repr``
    writes it).
    """
    text = os.fsdecode(name)
    return repr(text)


def check_text(value: str, option: str, *, max_chars: int | None = None) -> str:
    """``value`` of a text field (``--title``, ``--label``), or ConfigError (exit 2): it holds bytes
    that are not UTF-8 (lone surrogates), control characters (a newline, a tab, an escape), or more
    than ``max_chars`` characters."""
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
