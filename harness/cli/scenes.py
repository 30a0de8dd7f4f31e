"""``katra3d scenes``: the scenes katra3d can run, their params and suites; no GL import."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping

from katra3d.harness.cli._common import print_json
from katra3d.scenes.api import Param, Scene
from katra3d.scenes.registry import (
    TraceFile,
    builtin_scenes,
    describe_range,
    entry_point_scenes,
    get_scene,
    is_trace_spec,
    trace_file,
)
from katra3d.scenes.suites import SUITES, suites_containing
from katra_trace.errors import ExitCode, SceneError
from katra_trace.jsontext import JsonObject, JsonValue


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "scenes",
        help="list scenes: description, what they stress, params, suites",
        description="List the built-in and installed scenes with their description, "
        "what they stress, their params (default, valid range, meaning) "
        "and the suites that run them; also list the suites.",
    )
    p.add_argument(
        "scene",
        nargs="?",
        metavar="SCENE",
        help="show only this scene: a name, path/to/file.py:Class or package.module:Class",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _jsonable(value: object) -> JsonValue:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


@dataclasses.dataclass(frozen=True)
class ListedScene:
    """A scene as listed; ``origin``: builtin, its entry point, or the spec that loaded it;
    ``trace``: an apitrace trace (its description and params, the Scene defaults beside them)."""

    name: str
    cls: type[Scene]
    origin: str
    trace: TraceFile | None = None

    @property
    def description(self) -> str:
        if self.trace is not None:
            return self.trace.description
        # a user's scene often says what it is in its docstring only
        cls = self.cls
        return cls.description or (cls.__dict__.get("__doc__") or "").strip().split("\n")[0]

    @property
    def params(self) -> Mapping[str, Param]:
        return self.trace.params if self.trace is not None else self.cls.params

    def as_dict(self) -> JsonObject:
        cls = self.cls
        params: JsonObject = {
            key: {
                "default": _jsonable(param.default),
                "type": param.type.__name__,
                "min": param.min,
                "max": param.max,
                "choices": _jsonable(param.choices) if param.choices is not None else None,
                "range": describe_range(param),
                "help": param.help,
            }
            for key, param in self.params.items()
        }
        return {
            "name": self.name,
            "description": self.description,
            "stresses": list(cls.stresses),
            "min_gl_version": cls.min_gl_version,
            "required_extensions": list(cls.required_extensions),
            "params": params,
            "suites": suites_containing(self.name),
            "origin": self.origin,
        }


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """Every scene; ``errors``: (entry point, why it cannot be loaded)."""

    scenes: list[ListedScene]
    errors: list[tuple[str, str]]

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "scenes": [sc.as_dict() for sc in self.scenes],
            "suites": {
                s.name: {
                    "description": s.description,
                    "size": list(s.size),
                    "frames": s.frames,
                    "warmup": s.warmup,
                    "entries": [{"scene": n, "params": dict(p)} for n, p in s.entries],
                }
                for s in SUITES.values()
            },
        }
        if self.errors:
            out["errors"] = [{"name": name, "error": why} for name, why in self.errors]
        return out


def catalogue() -> Catalogue:
    builtins = builtin_scenes()
    scenes = [ListedScene(n, c, "builtin") for n, c in builtins.items()]
    errors: list[tuple[str, str]] = []
    for ep_name, ep in sorted(entry_point_scenes().items()):
        if ep_name in builtins:
            continue
        try:
            scenes.append(ListedScene(ep_name, get_scene(ep_name), f"entry point {ep.value}"))
        except SceneError as err:
            errors.append((ep_name, str(err)))
    return Catalogue(scenes, errors)


def one_scene(spec: str) -> ListedScene:
    """The scene ``spec`` names (SceneError if none)."""
    spec = spec.strip()
    if is_trace_spec(spec):
        trace = trace_file(spec)
        return ListedScene(trace.name, Scene, spec, trace)
    cls = get_scene(spec)
    entry_points = entry_point_scenes()
    if builtin_scenes().get(spec) is cls:
        return ListedScene(spec, cls, "builtin")
    if spec in entry_points:
        return ListedScene(spec, cls, f"entry point {entry_points[spec].value}")
    return ListedScene(str(getattr(cls, "name", "") or spec), cls, spec)


def _gl(code: int) -> str:
    return f"{code // 100}.{(code % 100) // 10}"


def scene_lines(sc: ListedScene, prefix: str | None = None) -> list[str]:
    """One scene as text, each param as the ``--param`` that sets it (``prefix``: default the
    scene's name)."""
    cls = sc.cls
    lines = [f"{sc.name}  -  {sc.description}" if sc.description else sc.name]
    extra = f"   (needs GL {_gl(cls.min_gl_version)})" if cls.min_gl_version > 330 else ""
    if cls.stresses or extra:
        lines.append(f"    stresses: {', '.join(cls.stresses) or '-'}{extra}")
    suites = suites_containing(sc.name)
    if suites:
        lines.append(f"    suites:   {', '.join(suites)}")
    if sc.origin != "builtin":
        lines.append(f"    from:     {sc.origin}")
    for key, p in sc.params.items():
        default = _jsonable(p.default)
        shown = ("true" if default else "false") if isinstance(default, bool) else default
        lines.append(
            f"    --param {prefix or sc.name}.{key}={shown}   [{describe_range(p)}]  {p.help}"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    if args.scene is not None:
        sc = one_scene(args.scene)
        if args.json:
            print_json(sc.as_dict())
        else:
            # `run` takes the spec's spelling as given in --param
            lines = scene_lines(
                sc, prefix=None if args.scene.strip() == sc.name else args.scene.strip()
            )
            if not sc.params:
                lines.append("    (no params)")
            print("\n".join(lines))
        return ExitCode.OK
    cat = catalogue()
    if args.json:
        print_json(cat.as_dict())
        return ExitCode.OK
    lines = []
    for sc in cat.scenes:
        lines += scene_lines(sc)
        lines.append("")
    lines.append("suites:")
    for s in SUITES.values():
        w, h = s.size
        lines.append(
            f"  {s.name:8} {w}x{h}, {s.frames} frames + {s.warmup} warmup per scene, "
            f"{len(s.entries)} scenes: {s.description}"
        )
    for name, why in cat.errors:
        lines.append(f"warning: installed scene '{name}' cannot be loaded: {why}")
    print("\n".join(lines))
    return ExitCode.OK
