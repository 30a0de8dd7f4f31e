"""``katra3d scenes``: the scenes katra3d can run, their params and suites; no GL import."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from katra3d.harness.cli._common import print_json
from katra3d.scenes.api import Param, Scene
from katra3d.scenes.registry import (
    builtin_scenes,
    describe_range,
    entry_point_scenes,
    get_scene,
    is_trace_spec,
    trace_file,
)
from katra3d.scenes.suites import SUITES, suites_containing
from katra_trace.errors import ExitCode, SceneError


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


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def catalogue() -> dict[str, Any]:
    scenes: list[dict[str, Any]] = []
    builtins = builtin_scenes()
    errors: list[dict[str, str]] = []
    classes: list[tuple[str, type[Scene], str]] = [(n, c, "builtin") for n, c in builtins.items()]
    for ep_name, ep in sorted(entry_point_scenes().items()):
        if ep_name in builtins:
            continue
        try:
            classes.append((ep_name, get_scene(ep_name), f"entry point {ep.value}"))
        except SceneError as err:
            errors.append({"name": ep_name, "error": str(err)})
    for name, cls, origin in classes:
        scenes.append(scene_entry(name, cls, origin))
    suites = {
        s.name: {
            "description": s.description,
            "size": list(s.size),
            "frames": s.frames,
            "warmup": s.warmup,
            "entries": [
                {"scene": n, "params": {k: _jsonable(v) for k, v in p.items()}}
                for n, p in s.entries
            ],
        }
        for s in SUITES.values()
    }
    out: dict[str, Any] = {"scenes": scenes, "suites": suites}
    if errors:
        out["errors"] = errors
    return out


def one_scene(spec: str) -> dict[str, Any]:
    """The scene ``spec`` names (SceneError if none)."""
    spec = spec.strip()
    if is_trace_spec(spec):  # a trace shows the Scene defaults beside its own facts
        trace = trace_file(spec)
        return {
            **scene_entry(trace.name, Scene, spec),
            "description": trace.description,
            "params": _params(trace.params),
        }
    cls = get_scene(spec)
    entry_points = entry_point_scenes()
    if builtin_scenes().get(spec) is cls:
        return scene_entry(spec, cls, "builtin")
    if spec in entry_points:
        return scene_entry(spec, cls, f"entry point {entry_points[spec].value}")
    return scene_entry(str(getattr(cls, "name", "") or spec), cls, spec)


def _params(params: Mapping[str, Param]) -> dict[str, Any]:
    return {
        key: {
            "default": _jsonable(param.default),
            "type": param.type.__name__,
            "min": param.min,
            "max": param.max,
            "choices": _jsonable(param.choices) if param.choices is not None else None,
            "range": describe_range(param),
            "help": param.help,
        }
        for key, param in params.items()
    }


def scene_entry(name: str, cls: type[Scene], origin: str) -> dict[str, Any]:
    return {
        "name": name,
        # a user's scene often says what it is in its docstring only
        "description": cls.description
        or (cls.__dict__.get("__doc__") or "").strip().split("\n")[0],
        "stresses": list(cls.stresses),
        "min_gl_version": cls.min_gl_version,
        "required_extensions": list(cls.required_extensions),
        "params": _params(cls.params),
        "suites": suites_containing(name),
        "origin": origin,
    }


def _gl(code: int) -> str:
    return f"{code // 100}.{(code % 100) // 10}"


def scene_lines(sc: dict[str, Any], prefix: str | None = None) -> list[str]:
    """One scene as text, each param as the ``--param`` that sets it (``prefix``: default the
    scene's name)."""
    lines = [f"{sc['name']}  -  {sc['description']}" if sc["description"] else sc["name"]]
    extra = f"   (needs GL {_gl(sc['min_gl_version'])})" if sc["min_gl_version"] > 330 else ""
    if sc["stresses"] or extra:
        lines.append(f"    stresses: {', '.join(sc['stresses']) or '-'}{extra}")
    if sc["suites"]:
        lines.append(f"    suites:   {', '.join(sc['suites'])}")
    if sc["origin"] != "builtin":
        lines.append(f"    from:     {sc['origin']}")
    for key, p in sc["params"].items():
        default = p["default"]
        shown = ("true" if default else "false") if isinstance(default, bool) else default
        lines.append(
            f"    --param {prefix or sc['name']}.{key}={shown}   [{p['range']}]  {p['help']}"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    if args.scene is not None:
        sc = one_scene(args.scene)
        if args.json:
            print_json(sc)
        else:
            # `run` takes the spec's spelling as given in --param
            lines = scene_lines(
                sc, prefix=None if args.scene.strip() == sc["name"] else args.scene.strip()
            )
            if not sc["params"]:
                lines.append("    (no params)")
            print("\n".join(lines))
        return ExitCode.OK
    cat = catalogue()
    if args.json:
        print_json(cat)
        return ExitCode.OK
    lines = []
    for sc in cat["scenes"]:
        lines += scene_lines(sc)
        lines.append("")
    lines.append("suites:")
    for name, s in cat["suites"].items():
        w, h = s["size"]
        lines.append(
            f"  {name:8} {w}x{h}, {s['frames']} frames + {s['warmup']} warmup per scene, "
            f"{len(s['entries'])} scenes: {s['description']}"
        )
    for err in cat.get("errors", []):
        lines.append(f"warning: installed scene '{err['name']}' cannot be loaded: {err['error']}")
    print("\n".join(lines))
    return ExitCode.OK
