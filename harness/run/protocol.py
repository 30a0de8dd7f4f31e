"""A counted child's :class:`ChildOrder` in and :class:`ChildResult` out: JSON built from the
dataclasses' annotations, in an envelope with :data:`VERSION` (another is refused whole)."""

from __future__ import annotations

import contextlib
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

VERSION = 1
#: Set by ab's and bisect's capture commands: the file ``katra3d run`` hands its ChildResult to.
RESULT_ENV = "KATRA3D_RESULT"

#: Fixed-length stand-ins for output and note (string lengths move counts); the join writes the
#: run's own strings.
STAND_INS = RunStrings(
    output="katra3d-counted-run-output.katra",
    requested="katra3d-counted-run-requested.katra",
    notes="katra3d counted run note",
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ChildOrder:
    """``args.json``: the one-scene plan, valgrind command, file scenes' specs and import path."""

    plan: RunPlan
    dump_dir: Path
    command: tuple[str, ...]
    deferred: bool
    imports: Mapping[str, str]
    sys_path: tuple[str, ...]

    @property
    def dump_base(self) -> Path:
        return self.dump_dir / measure.DUMP_BASE

    @property
    def trace(self) -> Path:
        return self.dump_dir / measure.CHILD_TRACE

    def measure_options(self) -> MeasureOptions:
        pinned = measure.pinned_env()
        counting = typing.cast(Counting, self.plan.counting)
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
    """``run``, or ``error`` with ``exit_code``; ``kept``: where the parent set a failed run's
    frames aside (None: nowhere, "": not said)."""

    run: RunResult | None = None
    error: str = ""
    exit_code: int = 0
    traceback: str = ""
    kept: str | None = ""

    @property
    def failed(self) -> bool:
        return self.run is None


def child_plan(plan: RunPlan) -> RunPlan:
    """``plan`` with :data:`STAND_INS` for output and note, screenshot folder absolute."""
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
    write(order.dump_dir / measure.ARGS_FILE, order)


def read_order(dump_dir: Path) -> ChildOrder:
    """The order in ``dump_dir``, each scene class found again (specs stay as given)."""
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
    write(dump_dir / measure.RESULTS_FILE, result)


def handed_back(dump_dir: Path) -> ChildResult | None:
    """What the child handed back; None when it wrote nothing readable."""
    return handed_result(dump_dir / measure.RESULTS_FILE)


def report_run(result: ChildResult) -> None:
    """``result`` into $KATRA3D_RESULT when set (the last run of a command wins), never over a file
    that is not a ChildResult."""
    where = os.environ.get(RESULT_ENV)
    if not where:
        return
    path = Path(where)
    if path.exists() and handed_result(path) is None:
        return
    with contextlib.suppress(OSError):  # the run's own outcome stands
        write(path, result)


def handed_result(path: Path) -> ChildResult | None:
    """The ChildResult a ``katra3d run`` wrote at ``path``; None when it wrote none readable."""
    try:
        return read(path, ChildResult)
    except ConfigError:
        return None


def write(path: Path, message: Any) -> None:
    kind = type(message).__name__
    envelope = {"katra3d_protocol": VERSION, "type": kind, "body": encode(message)}
    path.write_text(json.dumps(envelope), encoding="utf-8")


def read(path: Path, tp: type[T], scene_class: Callable[[str], type] = get_scene) -> T:
    """The ``tp`` message at ``path``; ConfigError when it is not one of this version."""
    return decode(tp, _body(path, tp), scene_class)


def _body(path: Path, tp: type) -> Any:
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
    """``data`` (from :func:`encode`) rebuilt as a ``tp``, not validated again; ConfigError when it
    is not one."""
    try:
        value = _decode(tp, data, scene_class)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"not a katra3d {tp.__name__} ({type(exc).__name__}: {exc})") from None
    return typing.cast(T, value)


def encode(value: Any) -> Any:
    """``value`` as JSON holds it, less fields holding a class and ``pixels``."""
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


def _holds_class(tp: Any) -> bool:
    """A field holding a scene class (``type``, ``type[Scene] | None``): found again by spec."""
    kinds = (
        typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    )
    return any(k is type or typing.get_origin(k) is type for k in kinds)


def _decode(tp: Any, value: Any, scene_class: Callable[[str], type]) -> Any:
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
        fields = {
            f.name: _decode(hints[f.name], value[f.name], scene_class)
            for f in dataclasses.fields(tp)
            if not _holds_class(hints[f.name]) and f.name in value
        }
        classes = {
            f.name: scene_class(str(value["spec"]))
            for f in dataclasses.fields(tp)
            if _holds_class(hints[f.name])
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
    "RESULT_ENV",
    "STAND_INS",
    "VERSION",
    "ChildOrder",
    "ChildResult",
    "child_plan",
    "decode",
    "encode",
    "hand_back",
    "handed_back",
    "handed_result",
    "read",
    "read_order",
    "report_run",
    "run_strings",
    "write",
    "write_order",
]
