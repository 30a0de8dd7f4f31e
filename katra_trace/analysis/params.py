"""Which scenes two captures ran with other params, and whether that comes from the scenes'
defaults alone.

A commit that changes a scene's default (``passes`` 1 -> 2) changes what the scene does, as any
other code change would: when both sides ran the same capture command with the same ``--param``
values, ``ab --refs`` and ``bisect`` compare them and say so. Any other difference needs
``--allow-param-mismatch`` (the decision model's comparability check, :mod:`.match`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from katra_trace.analysis.defaults import CompareOptions
from katra_trace.errors import ConfigError
from katra_trace.io.header import TraceHeader

#: What the line says of a change that comes from the scenes' defaults.
FROM_DEFAULTS = "from the scene's defaults"


@dataclasses.dataclass(frozen=True)
class ParamChange:
    """One scene's params that differ between BASE and NEW (``text``: "passes 1 -> 2"), and whether
    the scene's defaults alone made the difference."""

    scene: str
    text: str
    from_defaults: bool

    @property
    def line(self) -> str:
        why = FROM_DEFAULTS if self.from_defaults else "given as --param"
        return f"{self.scene}: params differ: {self.text}, {why}"


def _given(header: TraceHeader) -> dict[str, Any]:
    """The ``--param NAME.KEY=VALUE`` values of the capture (a mapping per scene is an older layout
    of the resolved params, not a value given)."""
    given = header.capture_options.extra.get("params")
    if not isinstance(given, Mapping):
        return {}
    return {k: v for k, v in given.items() if not isinstance(v, Mapping)}


def param_changes(base: TraceHeader, new: TraceHeader, same_command: bool) -> list[ParamChange]:
    """The scenes of both captures whose params differ. A difference is the defaults' when both
    ran the same command (``same_command``) with the same ``--param`` values, none of them a key
    that differs."""
    given = _given(base)
    same_given = same_command and given == _given(new)
    given_keys = {str(k).rpartition(".")[2] for k in given}
    out: list[ParamChange] = []
    new_scenes = new.capture_options.scene_params
    for scene, before in base.capture_options.scene_params.items():
        after = new_scenes.get(scene)
        if scene not in new_scenes or before == after:
            continue
        b = before if isinstance(before, Mapping) else {}
        a = after if isinstance(after, Mapping) else {}
        keys = [k for k in dict.fromkeys([*b, *a]) if b.get(k) != a.get(k)]
        text = ", ".join(f"{k} {b.get(k, '(none)')} -> {a.get(k, '(none)')}" for k in keys)
        out.append(ParamChange(scene, text, same_given and not given_keys & set(keys)))
    return out


def allow_defaults(changes: list[ParamChange], options: CompareOptions) -> CompareOptions:
    """The comparison's options given the param ``changes`` of its sides: params allowed to differ
    when the scenes' defaults alone differ; ConfigError (exit 2) naming a difference of any other
    kind and what to pass."""
    if not changes or options.allow_param_mismatch:
        return options
    other = next((c for c in changes if not c.from_defaults), None)
    if other is not None:
        raise ConfigError(
            f"{other.line} (or the sides ran other commands): give both the same --param values, "
            "or --allow-param-mismatch to compare anyway"
        )
    return dataclasses.replace(options, allow_param_mismatch=True)


__all__ = ["FROM_DEFAULTS", "ParamChange", "allow_defaults", "param_changes"]
