"""Scene lookup by spec (built-in, entry point, file, module, ``.trace``) and param validation.

Specs: docs/scenes.md, docs/replay.md."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import math
import os
import site
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from katra3d.scenes.api import Param, ParamValue, Scene
from katra_trace.errors import ConfigError, SceneError
from katra_trace.io.inputs import open_regular

ENTRY_POINT_GROUP = "katra3d.scenes"

_BUILTINS: tuple[tuple[str, str], ...] = (
    ("clear", "ClearScene"),
    ("triangle", "TriangleScene"),
    ("geometry", "GeometryScene"),
    ("drawcalls", "DrawCallsScene"),
    ("instancing", "InstancingScene"),
    ("fillrate", "FillrateScene"),
    ("shader", "ShaderScene"),
    ("texture", "TextureScene"),
    ("buffer", "BufferScene"),
    ("shadow", "ShadowScene"),
    ("postfx", "PostFxScene"),
    ("compute", "ComputeScene"),
)


def builtin_scenes() -> dict[str, type[Scene]]:
    out: dict[str, type[Scene]] = {}
    for module_name, class_name in _BUILTINS:
        module = importlib.import_module(f"katra3d.scenes.builtin.{module_name}")
        cls = getattr(module, class_name)
        out[cls.name] = cls
    return out


def entry_point_scenes() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_scene_names() -> list[str]:
    """Built-ins, then the entry points that do not shadow one."""
    names = list(builtin_scenes())
    names.extend(sorted(n for n in entry_point_scenes() if n not in names))
    return names


def _check_scene_class(obj: Any, where: str) -> type[Scene]:
    if not (inspect.isclass(obj) and issubclass(obj, Scene)):
        raise SceneError(
            f"{where} is not a katra3d scene: expected a subclass of katra3d.Scene, "
            f"found {type(obj).__name__ if not inspect.isclass(obj) else 'class ' + obj.__name__}"
        )
    if not obj.name:
        raise SceneError(f"{where} has no 'name': set the class attribute name = \"...\"")
    params = getattr(obj, "params", None)
    if not isinstance(params, Mapping):
        raise SceneError(
            f"{where}: 'params' must be a dict of name -> katra3d.Param(...), "
            f"found {type(params).__name__}"
        )
    for key, param in params.items():
        if not isinstance(key, str) or not isinstance(param, Param):
            raise SceneError(
                f"{where}: param {key!r} must be a katra3d.Param, e.g. "
                f"params = {{{str(key)!r}: Param({param!r}, type={type(param).__name__})}}, "
                f"found {type(param).__name__}"
            )
    return obj


def _scene_classes_in(module: Any) -> list[str]:
    return sorted(
        name
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, Scene)
        and obj is not Scene
        and getattr(obj, "__module__", None) == module.__name__
    )


def _class_from_module(module: Any, class_name: str, where: str) -> type[Scene]:
    if not hasattr(module, class_name):
        found = _scene_classes_in(module)
        listing = ", ".join(found) if found else "none"
        raise SceneError(f"{where} defines no class '{class_name}'; scene classes in it: {listing}")
    return _check_scene_class(getattr(module, class_name), f"'{class_name}' in {where}")


def _load_from_file(file_part: str, class_name: str) -> type[Scene]:
    path = Path(file_part).expanduser()
    where = f"file '{file_part}'"
    if not path.is_file():
        raise SceneError(f"scene file '{file_part}' not found")
    open_regular(path, what="scene file").close()  # the input rule
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    module_name = f"katra3d_user_scene_{resolved.stem}_{digest}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        if spec is None or spec.loader is None:
            raise SceneError(f"cannot load scene file '{file_part}': not a Python source file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            with _own_siblings(resolved.parent):
                spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - a user file may raise anything
            del sys.modules[module_name]
            raise SceneError(
                f"error while importing scene file '{file_part}': {type(exc).__name__}: {exc}"
            ) from None
    _on_import_path(resolved.parent)
    if not class_name:
        found = _scene_classes_in(module)
        if len(found) != 1:
            listing = (
                f"{len(found)} scene classes ({', '.join(found)}); name one, e.g. "
                f"'{file_part}:{found[0]}'"
                if found
                else "no scene class (a subclass of katra3d.Scene)"
            )
            raise SceneError(f"{where} defines {listing}")
        class_name = found[0]
    return _class_from_module(module, class_name, where)


# a scene file's Scene class must be katra3d's
_SHARED_TOPS = frozenset({"katra3d", "katra_trace"})


def _user_path(entry: str | None) -> Path | None:
    """``entry`` resolved, or None where it is not the user's (stdlib, installed package)."""
    if entry is None:
        return None
    path = Path(entry or ".").resolve()
    return None if any(path.is_relative_to(d) for d in _installed_dirs()) else path


@functools.cache
def _installed_dirs() -> frozenset[Path]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return frozenset(Path(d).resolve() for d in {*dirs, *site.getsitepackages()})


class _SiblingFinder(importlib.abc.MetaPathFinder):
    def __init__(self, folder: Path, names: set[str]) -> None:
        self.folder, self.names = folder, names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if path is not None or name not in self.names:
            return None
        installed = [e for e in sys.path if not (p := _user_path(e)) or not p.is_dir()]
        if importlib.machinery.PathFinder.find_spec(name, installed) is not None:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [str(self.folder)])


@contextlib.contextmanager
def _own_siblings(folder: Path) -> Iterator[None]:
    """While a scene file is imported, it gets the modules beside it, not another user folder's
    cached ones (set aside, then put back); stdlib and installed packages still win."""
    names = {p.stem for p in folder.glob("*.py")} | {
        p.parent.name for p in folder.glob("*/__init__.py")
    }
    names = {n for n in names if n.isidentifier()} - _SHARED_TOPS

    def foreign(module: Any) -> bool:
        where = [getattr(module, "__file__", None), *getattr(module, "__path__", ())]
        return any(p is not None and not p.is_relative_to(folder) for p in map(_user_path, where))

    clashing = {
        top
        for key, module in list(sys.modules.items())
        if (top := key.partition(".")[0]) in names and foreign(module)
    }
    taken = {k: m for k, m in list(sys.modules.items()) if k.partition(".")[0] in clashing}
    for key in taken:
        del sys.modules[key]
    finder = _SiblingFinder(folder, names)
    sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder), finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        if taken:
            for key in [k for k in sys.modules if k.partition(".")[0] in clashing]:
                del sys.modules[key]
            sys.modules.update(taken)


def _on_import_path(folder: Path) -> None:
    """Appends a scene file's folder to sys.path, as for a script; last, so it hides nothing."""
    if str(folder) not in sys.path:
        sys.path.append(str(folder))


def _load_from_module(module_part: str, class_name: str) -> type[Scene]:
    try:
        module = importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        raise SceneError(f"cannot import scene module '{module_part}': {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a user module may raise anything
        raise SceneError(
            f"error while importing scene module '{module_part}': {type(exc).__name__}: {exc}"
        ) from None
    return _class_from_module(module, class_name, f"module '{module_part}'")


def _looks_like_file(part: str) -> bool:
    return part.endswith(".py") or "/" in part or "\\" in part


def split_file_spec(spec: str) -> tuple[str, str] | None:
    """``(file, class)`` of a file spec (class ``""``: its one scene class), else None."""
    spec = spec.strip()
    left, sep, class_name = spec.rpartition(":")
    if sep and class_name.isidentifier() and _looks_like_file(left):
        return left, class_name
    if not sep and _looks_like_file(spec):
        return spec, ""
    return None


def absolute_spec(spec: str, cls: type[Scene], base: Path | None = None) -> str:
    """A file spec made absolute against ``base`` (default cwd)."""
    parts = split_file_spec(spec)
    if parts is None:
        return spec
    path = Path(parts[0]).expanduser()
    return f"{os.path.abspath(path if base is None else base / path)}:{parts[1] or cls.__name__}"


def with_class(spec: str, cls: type[Scene] | TraceFile) -> str:
    """``x.py`` -> ``x.py:Class``; other specs as they are."""
    parts = split_file_spec(spec)
    return f"{parts[0]}:{_class_name(cls)}" if parts is not None and not parts[1] else spec.strip()


def names_scene(name: str, spec: str, cls: type[Scene] | TraceFile) -> bool:
    """Whether ``name`` (``--param NAME.KEY=VALUE``) is the scene's name, spec or file spelling."""
    if name.strip() in (cls.name, spec.strip()):
        return True
    mine, theirs = split_file_spec(spec), split_file_spec(name)
    if mine is None or theirs is None or theirs[1] not in ("", _class_name(cls)):
        return False
    return Path(mine[0]).expanduser().resolve() == Path(theirs[0]).expanduser().resolve()


def find_file_spec(spec: str, bases: tuple[Path, ...]) -> str:
    """A relative file spec resolved against the first of ``bases`` having it, else SceneError."""
    parts = split_file_spec(spec)
    if parts is None or Path(parts[0]).expanduser().is_absolute():
        return spec
    tried = list(dict.fromkeys(Path(os.path.abspath(base / parts[0])) for base in bases))
    for path in tried:
        if path.is_file():
            return f"{path}:{parts[1]}" if parts[1] else str(path)
    raise SceneError(f"scene file '{parts[0]}' not found; tried {', '.join(str(p) for p in tried)}")


TRACE_SUFFIX = ".trace"


@dataclasses.dataclass(frozen=True)
class TraceFile:
    """An apitrace trace a run replays with glretrace (not a Scene). Its params (SHA-256, size)
    keep different traces of one name from being compared unless allowed."""

    path: str  # absolute
    sha256: str
    size_bytes: int

    @property
    def name(self) -> str:
        return Path(self.path).stem

    @property
    def description(self) -> str:
        return f"apitrace trace {Path(self.path).name}, replayed by glretrace"

    @property
    def class_name(self) -> str:
        """What a file spec records after ``:`` (``FILE.trace:Trace_STEM``)."""
        return f"Trace_{self.name}"

    @property
    def params(self) -> dict[str, Param]:
        sha, n = self.sha256, self.size_bytes
        return {
            "trace_sha256": Param(
                sha, str, help="the trace file's SHA-256 (not to be set)", choices=(sha,)
            ),
            "trace_bytes": Param(
                n, int, n, n, help="the trace file's size in bytes (not to be set)"
            ),
        }


def is_trace_spec(spec: str) -> bool:
    return spec.strip().endswith(TRACE_SUFFIX)


def scene_or_trace(spec: str) -> type[Scene] | TraceFile:
    """What a run's ``spec`` names: a scene class, or an apitrace trace to replay."""
    return trace_file(spec) if is_trace_spec(spec) else get_scene(spec)


def _class_name(kind: type[Scene] | TraceFile) -> str:
    """What a file spec records after ``:``."""
    return kind.class_name if isinstance(kind, TraceFile) else kind.__name__


def trace_file(spec: str) -> TraceFile:
    """The apitrace trace ``spec`` names, read once for its SHA-256 and size."""
    path = Path(spec.strip()).expanduser()
    digest = hashlib.sha256()
    size = 0
    with open_regular(path) as fh:  # the input rule: no FIFO or device
        try:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        except OSError as exc:
            raise SceneError(f"cannot read trace file '{spec}': {exc.strerror or exc}") from None
    return TraceFile(os.path.abspath(path), digest.hexdigest(), size)


def get_scene(spec: str) -> type[Scene]:
    """SceneError (with close matches) when the spec names no scene."""
    spec = spec.strip()
    if is_trace_spec(spec):
        raise SceneError(
            f"'{spec}' is an apitrace trace, not a scene: replay it with katra3d run "
            "(docs/replay.md)"
        )
    builtins = builtin_scenes()
    if spec in builtins:
        return builtins[spec]
    entry_points = entry_point_scenes()
    if spec in entry_points:
        ep = entry_points[spec]
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - a package may raise anything
            raise SceneError(
                f"cannot load scene '{spec}' from entry point '{ep.value}': "
                f"{type(exc).__name__}: {exc}"
            ) from None
        return _check_scene_class(obj, f"entry point '{spec}' ({ep.value})")
    file_spec = split_file_spec(spec)
    if file_spec is not None:
        return _load_from_file(*file_spec)
    if ":" in spec:
        left, _, class_name = spec.rpartition(":")
        if not class_name.isidentifier():
            raise SceneError(f"bad scene spec '{spec}': after ':' must come a class name")
        return _load_from_module(left, class_name)
    names = available_scene_names()
    close = difflib.get_close_matches(spec, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise SceneError(
        f"unknown scene '{spec}'{hint}; available: {', '.join(names)} "
        f"(or path/to/file.py, path/to/file.py:Class, package.module:Class)"
    )


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def describe_range(param: Param) -> str:
    """'choices: a, b', '1..64', '>= 0', 'true/false'."""
    if param.choices is not None:
        return "choices: " + ", ".join(_fmt(c) for c in param.choices)
    if param.type is bool:
        return "true/false"
    if param.min is not None and param.max is not None:
        return f"{_fmt(param.min)}..{_fmt(param.max)}"
    if param.min is not None:
        return f">= {_fmt(param.min)}"
    if param.max is not None:
        return f"<= {_fmt(param.max)}"
    return f"any {param.type.__name__}"


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def convert_param(scene_name: str, key: str, param: Param, value: Any) -> Any:
    """A Python value or CLI string as ``param.type``, range-checked; else ConfigError."""

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"scene '{scene_name}': param '{key}' {why}; valid: {describe_range(param)}"
        )

    kind = param.type
    if isinstance(value, str):
        text = value.strip()
        if kind is bool:
            low = text.lower()
            if low in _TRUE:
                out: Any = True
            elif low in _FALSE:
                out = False
            else:
                raise bad(f"expects true/false, got '{value}'")
        elif kind is int:
            try:
                out = int(text)
            except ValueError:
                try:
                    out = int(text, 0)  # 0x10, 0o17, 1_000
                except ValueError:
                    raise bad(f"expects an integer, got '{value}'") from None
        elif kind is float:
            try:
                out = float(text)
            except ValueError:
                raise bad(f"expects a number, got '{value}'") from None
        elif kind is str:
            out = text
        else:
            try:
                out = kind(text)
            except Exception:  # noqa: BLE001 - a user param type may raise anything
                raise bad(f"cannot convert '{value}' to {kind.__name__}") from None
    else:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            out = float(value)
        elif kind is int and isinstance(value, bool):
            raise bad(f"expects an integer, got {value!r}")
        elif isinstance(value, kind):
            out = value
        else:
            raise bad(f"expects {kind.__name__}, got {type(value).__name__} {value!r}")
    if isinstance(out, float) and not math.isfinite(out):
        raise bad(f"must be finite, got {value!r}")
    if param.choices is not None and out not in param.choices:
        raise bad(f"got {_fmt(out)!r}")
    if kind in (int, float):
        if (param.min is not None and out < param.min) or (
            param.max is not None and out > param.max
        ):
            raise bad(f"is out of range: {_fmt(out)}")
    return out


def resolve_params(
    scene: type[Scene] | TraceFile, overrides: Mapping[str, ParamValue]
) -> dict[str, ParamValue]:
    """Defaults merged with ``overrides``; ConfigError for a bad key or value."""
    declared = dict(scene.params)
    unknown = [k for k in overrides if k not in declared]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, list(declared), n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        valid = ", ".join(declared) if declared else "none"
        raise ConfigError(f"scene '{scene.name}' has no param '{key}'{hint} valid params: {valid}")
    out: dict[str, ParamValue] = {}
    for key, param in declared.items():
        value = overrides[key] if key in overrides else param.default
        out[key] = convert_param(scene.name, key, param, value)
    return out


__all__ = [
    "ENTRY_POINT_GROUP",
    "TRACE_SUFFIX",
    "TraceFile",
    "available_scene_names",
    "builtin_scenes",
    "convert_param",
    "describe_range",
    "entry_point_scenes",
    "get_scene",
    "is_trace_spec",
    "resolve_params",
    "scene_or_trace",
    "trace_file",
]
