"""Scenes two captures ran with other params: a changed default is a code change (``ab --refs``,
``bisect`` compare it); any other difference needs ``--allow-param-mismatch``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from katra_trace.analysis.defaults import CompareOptions
from katra_trace.errors import ConfigError
from katra_trace.io.header import TraceHeader

FROM_DEFAULTS = "from the scene's defaults"


@dataclasses.dataclass(frozen=True)
class ParamChange:
    """``text``: "passes 1 -> 2"; whether the defaults alone made the difference."""

    scene: str
    text: str
    from_defaults: bool

    @property
    def line(self) -> str:
        why = FROM_DEFAULTS if self.from_defaults else "given as --param"
        return f"{self.scene}: params differ: {self.text}, {why}"


def _given(header: TraceHeader) -> dict[str, object]:
    """The ``--param`` values (a mapping per scene is an older layout, not a given value)."""
    given = header.capture_options.extra.get("params")
    if not isinstance(given, Mapping):
        return {}
    return {k: v for k, v in given.items() if not isinstance(v, Mapping)}


def param_changes(base: TraceHeader, new: TraceHeader, same_command: bool) -> list[ParamChange]:
    """Defaults-only when both ran the same command and ``--param`` values, none of a differing
    key."""
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
    """Allows params to differ when only defaults differ; else ConfigError naming what to pass."""
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
