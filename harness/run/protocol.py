"""What a run hands a child process and gets back: a :class:`ChildOrder` in, a
:class:`ChildResult` out, one versioned serializer.

:func:`write` and :func:`read` carry any dataclass as JSON, field by field from its annotations (a
field added to RunConfig or RunPlan travels by itself), in an envelope with :data:`VERSION`: a
message of another version or type is refused whole. Counted children speak it; so can any process
that receives a plan (``write(path, plan)`` in the parent, ``read(path, RunPlan)`` in the child).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from katra3d.harness.engine.results import RunResult
from katra3d.harness.run import measure
from katra3d.harness.run.config import RunPlan
from katra3d.harness.run.parts import RunStrings
from katra3d.harness.run.valgrind import Counting
from katra3d.scenes.registry import get_scene
from katra_trace.errors import ConfigError
from katra_trace.io.header import MeasureOptions

#: The protocol's version: a reader refuses a message of any other.
VERSION = 1

#: What a counted child is told in place of the user's output path (resolved, and ``-o`` as given)
#: and note: strings of one fixed length each. A child's heap, and with it every count, depends on
#: the lengths of the strings it holds (measured: ``-o`` names of 7 and 41 characters with notes of
#: 0 and 33 moved a 32x32 ``triangle`` frame by up to 224 instructions, names of one length by 0),
#: so the child records these, and the parent's join writes the run's own strings into the one
#: trace it writes (:class:`katra3d.harness.run.parts.RunStrings`).
STAND_INS = RunStrings(
    output="katra3d-counted-run-output.katra",
    requested="katra3d-counted-run-requested.katra",
    notes="katra3d counted run note",
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ChildOrder:
    """What the parent hands its counted child (``args.json`` in the dump directory).

    ``plan``: the checked one-scene plan (its ``counting``: the mode and the valgrind found when it
    was planned; its output and note :data:`STAND_INS`, :func:`child_plan`);
    ``dump_dir``: the dump directory; ``command``: the valgrind command the child runs under;
    ``deferred``: callgrind's instrumentation starts at each scene's first measured frame;
    ``imports``: {spec: absolute spec} of the file scenes, ``sys_path``: the folders put first on
    the child's import path (:func:`katra3d.harness.run.measure.scene_imports`).
    """

    plan: RunPlan
    dump_dir: Path
    command: tuple[str, ...]
    deferred: bool
    imports: Mapping[str, str]
    sys_path: tuple[str, ...]

    @property
    def dump_base(self) -> Path:
        """Where callgrind writes its dumps (``--callgrind-out-file``)."""
        return self.dump_dir / measure.DUMP_BASE

    @property
    def trace(self) -> Path:
        """Where the child writes its trace (the parent joins it into the user's output)."""
        return self.dump_dir / measure.CHILD_TRACE

    def measure_options(self) -> MeasureOptions:
        """What the child's trace header records under ``capture_options.measure``."""
        pinned = measure.pinned_env()
        counting = typing.cast(Counting, self.plan.counting)  # a counted plan (read_order)
        return MeasureOptions(
            mode=counting.mode,
            valgrind=counting.version,
            command=self.command,
            env=pinned,
            frame_boundary=measure.frame_boundary(self.deferred),
            pinned={k: pinned[k] for k in ("LP_NATIVE_VECTOR_WIDTH", "MESA_SHADER_CACHE_DISABLE")},
            output=str(self.plan.output),
        )


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """What a child hands back: ``run`` (its results; each scene's image stays in the child), or
    ``error`` with its ``exit_code`` and the scene's ``traceback``. ``kept`` is the parent's: where
    a failed run's frames were set aside (None: nowhere, "": not said)."""

    run: RunResult | None = None
    error: str = ""
    exit_code: int = 0
    traceback: str = ""
    kept: str | None = ""

    @property
    def failed(self) -> bool:
        return self.run is None


def child_plan(plan: RunPlan) -> RunPlan:
    """``plan`` as a counted child gets it: its output (resolved and requested) and note
    :data:`STAND_INS`, its screenshot folder absolute (the child runs in its dump directory)."""
    config = dataclasses.replace(plan.config, notes=STAND_INS.notes)
    if config.output is not None:
        config = dataclasses.replace(config, output=STAND_INS.requested)
    shots = plan.screenshot_dir
    return dataclasses.replace(
        plan,
        config=config,
        output=Path(STAND_INS.output),
        screenshot_dir=Path(os.path.abspath(shots)) if shots else None,
    )


def run_strings(plan: RunPlan) -> RunStrings:
    """The run's own strings, where its children's traces record :data:`STAND_INS`."""
    return RunStrings(str(plan.output), plan.config.output, plan.config.notes)


def write_order(order: ChildOrder) -> None:
    """Write ``order`` into its dump directory, where the child reads it (:func:`read_order`)."""
    write(order.dump_dir / measure.ARGS_FILE, order)


def read_order(dump_dir: Path) -> ChildOrder:
    """The order the parent wrote into ``dump_dir``, each scene class found again through the
    registry: a file scene from the absolute path the parent resolved (``imports``), after the
    parent's import path (``sys_path``) is put first; the plan keeps each spec as the user gave it.
    """
    path = dump_dir / measure.ARGS_FILE
    body = _body(path, ChildOrder)
    try:
        imports = {str(k): str(v) for k, v in body["imports"].items()}
        sys_path = [str(p) for p in body["sys_path"]]
    except (KeyError, TypeError, AttributeError):
        raise ConfigError(f"{path} is not a katra3d ChildOrder") from None
    sys.path[:0] = sys_path
    order = decode(ChildOrder, body, lambda spec: get_scene(imports.get(spec, spec)))
    if order.plan.counting is None:
        raise ConfigError(f"{path} holds a plan that does not count")
    return order


def hand_back(dump_dir: Path, result: ChildResult) -> None:
    """Write the child's result (or its error) into the dump directory, for the parent."""
    write(dump_dir / measure.RESULTS_FILE, result)


def handed_back(dump_dir: Path) -> ChildResult | None:
    """What the child handed back, or None when it wrote nothing readable (it was killed)."""
    try:
        return read(dump_dir / measure.RESULTS_FILE, ChildResult)
    except ConfigError:
        return None


def write(path: Path, message: Any) -> None:
    """Write ``message`` (a dataclass) to ``path`` in the envelope of :data:`VERSION`."""
    kind = type(message).__name__
    envelope = {"katra3d_protocol": VERSION, "type": kind, "body": encode(message)}
    path.write_text(json.dumps(envelope), encoding="utf-8")


def read(path: Path, tp: type[T], scene_class: Callable[[str], type] = get_scene) -> T:
    """The ``tp`` message at ``path`` (:func:`write`); ConfigError when it is not one of this
    version. ``scene_class(spec)`` finds a scene entry's class again."""
    return decode(tp, _body(path, tp), scene_class)


def _body(path: Path, tp: type) -> Any:
    """The body of the ``tp`` message at ``path``, its envelope checked."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        version, kind, body = data["katra3d_protocol"], data["type"], data["body"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a katra3d {tp.__name__} ({type(exc).__name__})") from None
    if version != VERSION or kind != tp.__name__:
        raise ConfigError(
            f"{path} holds a {kind} of protocol {version}; this katra3d reads a {tp.__name__} of "
            f"protocol {VERSION} (parent and child must be one version)"
        )
    return body


def decode(tp: type[T], data: Any, scene_class: Callable[[str], type] = get_scene) -> T:
    """``data`` (what :func:`encode` made, through JSON) rebuilt as a ``tp``; ConfigError when it
    is not one. Nothing is validated again: the sender checked it."""
    try:
        value = _decode(tp, data, scene_class)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"not a katra3d {tp.__name__} ({type(exc).__name__}: {exc})") from None
    return typing.cast(T, value)


def encode(value: Any) -> Any:
    """``value`` as JSON holds it: dataclasses as objects of their fields, tuples as lists, paths
    as strings, numpy values as Python's; a field holding a class (a scene entry's) is left out
    (its spec finds it again), and so is an image (``pixels``: it stays where it was taken)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: encode(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not isinstance(getattr(value, f.name), type) and f.name != "pixels"
        }
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # a numpy scalar or array
        return value.tolist()
    return value


def _decode(tp: Any, value: Any, scene_class: Callable[[str], type]) -> Any:
    """``value`` (as JSON gives it) rebuilt to the type ``tp`` (a field's annotation)."""
    origin = typing.get_origin(tp)
    if value is None or tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(tp) if a is not type(None)]
        # one type, or several that JSON tells apart (zones: bool | str)
        return _decode(kinds[0], value, scene_class) if len(kinds) == 1 else value
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, scene_class) for v in value)
        return tuple(_decode(a, v, scene_class) for a, v in zip(args, value, strict=True))
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_decode(item, v, scene_class) for v in value]
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        key_type, value_type = typing.get_args(tp)
        return {
            _decode(key_type, k, scene_class): _decode(value_type, v, scene_class)
            for k, v in value.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp, vars(sys.modules[tp.__module__]))
        # a field holding a class (SceneEntry.cls) did not travel: the entry's spec finds it again
        fields = {
            f.name: _decode(hints[f.name], value[f.name], scene_class)
            for f in dataclasses.fields(tp)
            if hints[f.name] is not type and f.name in value
        }
        classes = {
            f.name: scene_class(str(value["spec"]))
            for f in dataclasses.fields(tp)
            if hints[f.name] is type
        }
        return tp(**fields, **classes)
    if tp is Path:
        return Path(value)
    if tp is float:
        return float(value)
    if tp in (int, str, bool) and not isinstance(value, tp):
        raise TypeError(f"expected {tp.__name__}, found {type(value).__name__}")
    return value


__all__ = [
    "STAND_INS",
    "VERSION",
    "ChildOrder",
    "ChildResult",
    "child_plan",
    "decode",
    "encode",
    "hand_back",
    "handed_back",
    "read",
    "read_order",
    "run_strings",
    "write",
    "write_order",
]
